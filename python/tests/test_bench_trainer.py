"""``python -m sluice.bench trainer`` runs end to end: a dispatcher and workers as
processes, a read of 1 MiB elements from this interpreter, and its table beside
the targets and the memcpy limit (tf.data service's row says whether tensorflow
imported)."""

import importlib.util

from sluice.bench import main


def test_the_trainer_bench_reads_every_element_and_prints_its_figures_beside_targets(capsys):
    assert main(["trainer", "--elements", "20", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    sluice_row = next(line for line in out.splitlines() if line.startswith("Sluice "))
    assert "<= 150 us/el" in sluice_row
    rate, cpu_us = sluice_row.split()[1:3]
    assert float(rate.replace(",", "")) > 0 and float(cpu_us) > 0
    assert any(line.startswith("limit: memcpy of 1 MiB") for line in out.splitlines())
    assert any(line.startswith("limit: loopback recv") for line in out.splitlines())
    if importlib.util.find_spec("tensorflow") is None:
        assert "not measured: tensorflow does not import" in out
    else:
        assert ">= 4x" in out
