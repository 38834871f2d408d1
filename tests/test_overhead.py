"""The overhead benchmark's logic (timings are measured by the benchmark, not asserted here)."""
import pytest
import torch

from paper_repro import cli, methods, models
from paper_repro import overhead


def test_ratio_summary_takes_the_median_of_per_repetition_ratios():
    r = overhead.ratio_summary([1.0, 2.0, 4.0], [1.1, 2.0, 3.0])
    # ratios 1.1, 1.0, 0.75 -> median 1.0; medians of the sides 2.0 and 2.0
    assert r["ratio"] == pytest.approx(1.0) and r["ratio_min"] == 0.75 and r["ratio_max"] == pytest.approx(1.1)
    assert (r["plain_s"], r["learner_s"], r["repeats"]) == (2.0, 2.0, 3)
    with pytest.raises(ValueError, match="equally many"):
        overhead.ratio_summary([1.0], [1.0, 2.0])


@pytest.mark.parametrize("name, kw, x, y", [
    ("mlp", dict(depth=3, width=8, in_dim=6), torch.randn(4, 6), torch.randint(10, (4,))),
    ("transformer", dict(vocab_size=11, d_model=8, n_layers=2, n_heads=2, seq_len=5),
     torch.randint(11, (3, 5)), torch.randint(11, (3, 5)))])
def test_both_steps_make_the_same_update(name, kw, x, y):
    torch.manual_seed(0)
    net = models.build(name, **kw).double()
    plain = models.build(name, **kw).double()
    plain.load_state_dict(net.state_dict())
    learner = methods.build(net, "backprop")
    opt_a = torch.optim.SGD(plain.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(learner.parameters(), lr=0.1)
    xa = x.double() if x.is_floating_point() else x
    loss_a = overhead.plain_step(plain, opt_a, xa, y)
    loss_b = overhead.learner_step(learner, opt_b, xa, y)
    assert loss_b == [pytest.approx(loss_a, rel=1e-12)]
    for pa, pb in zip(plain.parameters(), net.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-12, atol=1e-12)


def test_overhead_cli_prints_both_sides_and_the_ratio(capsys):
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "overhead", "--model-kwargs", '{"depth": 2, "width": 8, "in_dim": 8}',
                              "--batch-size", "4", "--steps", "2", "--repeats", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "plain PyTorch loop" in out and "learner (backprop)" in out and "ratio learner/plain" in out
    args = parser.parse_args(["bench", "overhead", "--steps", "0"])
    with pytest.raises(ValueError, match="steps"):
        args.func(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench"])  # a subcommand is required
