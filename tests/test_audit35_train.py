"""Thirty-fifth session's audit of training: batches that each hold one class (spc-r with --batch-size 2,
spc-n with n) give a ranking loss no negative pair; the run trained to loss 0 without a word."""

import numpy as np
import pytest

from embedscope.train.trainer import sampler_notes

Y = np.repeat(np.arange(5), 20)


@pytest.mark.parametrize("sampler,batch,loss", [("spc-r", 2, "margin"), ("spc-2", 2, "triplet"),
                                                ("spc-4", 4, "npair"), ("spc-8", 8, "multisimilarity")])
def test_one_class_batches_of_a_ranking_loss_are_noted(sampler, batch, loss):
    notes = sampler_notes(sampler, Y, batch_size=batch, loss=loss)
    assert len(notes) == 1 and "no negative pair" in notes[0] and f"--batch-size {batch}" in notes[0]


@pytest.mark.parametrize("sampler,batch,loss", [("spc-r", 3, "margin"), ("spc-2", 4, "margin"),
                                                ("spc-r", 2, "proxynca"), ("spc-2", 2, "softmax"),
                                                ("random", 2, "margin"), ("gc", 2, "margin")])
def test_batches_of_two_classes_or_a_proxy_loss_are_not(sampler, batch, loss):
    assert sampler_notes(sampler, Y, batch_size=batch, loss=loss) == []


def test_the_cli_run_prints_it(tmp_path, capsys):
    from embedscope.cli import main

    assert main(["train", "--dataset", "digits", "--loss", "margin", "--sampler", "spc-r", "--batch-size", "2",
                 "--epochs", "0", "--embed-dim", "4", "-o", str(tmp_path / "m.pt"), "--no-progress"]) == 0
    assert "note: --sampler spc-r with --batch-size 2: every batch holds images of one class" in capsys.readouterr().out
