"""The device check tool (:mod:`research.simulator_validation.memcheck`): the memory accounting
against the saved-tensor meter on CPU, and the committed GPU checks read back."""
from pathlib import Path

from research.simulator_validation import memcheck


def test_device_check_runs_on_cpu_and_matches(tmp_path):
    out = tmp_path / "check.md"
    rc = memcheck.main(["--device", "cpu", "--model", "resnet18", "--model-kwargs", '{"width": 4}', "--image-size", "8",
                        "--stages", "2", "--micro-batch", "4", "--micro-batches", "4", "--out", str(out)])
    assert rc == 0
    rows = memcheck.read_table(out)
    assert len(rows) == 2 * len(memcheck.CHECKED)
    assert all(row["saved_ratio"] == 1.0 for row in rows)     # predicted / measured
    assert all(row["cuda_measured"] is None for row in rows) and memcheck.worst_stage(rows) == []
    assert "needs the most" not in out.read_text()
    assert memcheck.main(["--device", "cpu", "--schedule", "zbv"]) == 2


def test_the_committed_gpu_checks_read_back_and_their_worst_stages_are_the_largest_rows():
    tables = sorted((Path(__file__).resolve().parents[2] / "results/simulate").glob("gpu_memory_check_*.md"))
    assert tables, "the H200 memory checks are committed"
    for path in tables:
        rows = memcheck.read_table(path)
        assert len(rows) == len({r["stage"] for r in rows}) * len(memcheck.CHECKED)
        assert all(r["saved_ratio"] == 1.0 for r in rows)
        for w in memcheck.worst_stage(rows):
            mine = [r for r in rows if r["schedule"] == w["schedule"]]
            assert w["measured"] == max(r["cuda_measured"] for r in mine)
            assert w["predicted"] == max(r["peak_predicted"] for r in mine)
            assert w["ratio"] == w["predicted"] / w["measured"]
