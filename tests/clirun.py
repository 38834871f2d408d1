"""Running the command line in-process, as the tests of its answers do."""
from paper_repro import cli


def run_cli(argv, capsys):
    """``paper-repro ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err
