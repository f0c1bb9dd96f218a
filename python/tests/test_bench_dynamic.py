"""``python -m sluice.bench dynamic`` runs end to end: a dispatcher and a worker
pool as processes, a DYNAMIC read of one-element splits from this interpreter,
and its table (tf.data service's row says whether tensorflow imported)."""

import importlib.util

from sluice.bench import main


def test_the_dynamic_bench_reads_every_element_and_prints_its_figures_beside_targets(capsys):
    assert main(["dynamic", "--elements", "300", "--tf-elements", "50", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    sluice_row = next(line for line in out.splitlines() if line.startswith("Sluice "))
    assert "<= 10 us/el dispatcher" in sluice_row
    rate, dispatcher_us = sluice_row.split()[1:3]
    assert float(rate.replace(",", "")) > 0 and float(dispatcher_us) >= 0
    if importlib.util.find_spec("tensorflow") is None:
        assert "not measured: tensorflow does not import" in out
    else:
        assert ">= 50x" in out
