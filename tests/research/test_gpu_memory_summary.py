"""The stored GPU memory checks accounted again by the current memory accounting."""
from paper_repro import methods
from paper_repro.simulate.memory import MetaNet, stage_memory
from research.simulator_validation import gpu_memory_summary as gms
from research.simulator_validation.memcheck import read_table


def test_gpu_memory_summary_accounts_the_stored_measurements_again(tmp_path):
    path = gms.STORE / "gpu_memory_check_s4_mb8.md"
    cfg, rows = gms.reaccount(path)
    assert (cfg.model, cfg.image_size, cfg.num_classes, cfg.stages, cfg.micro_batch) == ("resnet34", 224, 1000, 4, 8)
    stored = read_table(path)
    meta = MetaNet(cfg)
    cut = methods.module_blocks("chunked-4", meta.blocks)
    local = stage_memory(meta, "local", 4, 8, 16, cut, first_step_inference=False)
    for new, old in zip(rows, stored):
        assert new["cuda_measured"] == old["cuda_measured"]        # the measurement is kept
        assert new["peak_ratio"] == new["peak_predicted"] / new["cuda_measured"]
        if new["schedule"] == "local":
            assert new["peak_predicted"] == local[new["stage"]]["peak_bytes"]
    assert gms.main(["--out", str(tmp_path / "s.md"), str(path)]) == 0
    assert "All 20 stage rows" in (tmp_path / "s.md").read_text()
