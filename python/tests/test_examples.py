"""The scripts in examples/ run as written and exit 0 (the torch one where torch
is installed)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def run(name: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_the_jax_style_example_trains_and_resumes():
    out = run("jax_style_loop.py")
    assert "restored: rejoining job" in out
    assert "learned y = 3.00x + 2.00" in out, out


def test_the_torch_example_trains_and_resumes():
    pytest.importorskip("torch", reason="torch is not installed in this environment (CI does not install it)")
    out = run("torch_train.py")
    assert "checkpoint after" in out and "learned y = 3.00x + 2.00" in out, out


def test_the_tokenizer_example_packs_tokens_and_learns():
    out = run("text_tokens.py")
    # The example prints the numpy dtype of the batches it received: pack's int32
    # rows arrive as int32 (not widened to int64).
    assert "epoch 2:" in out and "x33 int32 tokens" in out, out
    assert "int64" not in out, out
    assert "loss fell from" in out, out


def test_the_image_example_augments_on_the_workers_as_locally():
    out = run("image_augment.py")
    assert "all 128 augmented images equal the local augmentation" in out, out
    assert "final accuracy" in out, out


def test_the_webdataset_example_reads_each_sample_once_and_learns():
    out = run("webdataset_train.py")
    assert out.count("192 samples, each once") == 3, out
    accuracy = float(out.rsplit("final accuracy ", 1)[1].split()[0])
    assert accuracy > 0.9, out


def test_the_parquet_example_reads_each_row_once_through_a_worker_stop_and_learns():
    out = run("parquet_train.py")
    assert out.count("1000 rows, each once") == 3, out
    accuracy = float(out.rsplit("final accuracy ", 1)[1].split()[0])
    assert accuracy > 0.9, out
