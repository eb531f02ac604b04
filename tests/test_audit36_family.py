"""Audit 36 (a helper playing a new user with foreign checkpoints): a trained Roth et al. checkpoint and a
pytorch-metric-learning trunk + embedder were labelled "untrained network" by `saliency` (family
untrained, Euclidean distance), because their configs carry no `loss`: the agreement table grouped
them with the random networks. Now Roth's loss option gives the family and the distance, a foreign
file that names no loss is family `other` (Euclidean, said so), and only networks without DML
training are untrained (docs/saliency.md, docs/methods.md §8)."""

from __future__ import annotations

import argparse

import pytest
import torch
from torch import nn

from embedscope.models import load_checkpoint
from embedscope.models.distances import distance_and_source, distance_for_config, is_untrained
from embedscope.saliency.run import family_for_config


def _save_roth(path, loss):
    from torchvision.models import googlenet

    class RothGoogLeNet(nn.Module):  # their attribute layout (test_adapters.test_roth_googlenet)
        def __init__(self):
            super().__init__()
            self.model = googlenet(weights=None, aux_logits=False, transform_input=True, init_weights=False)
            self.model.last_linear = nn.Linear(1024, 8)
            self.model.fc = self.model.last_linear

    torch.manual_seed(0)
    opt = argparse.Namespace(arch="googlenet_normalize", embed_dim=8, dataset="cub200", loss=loss,
                             batch_mining="distance", epoch=12)
    torch.save({"state_dict": RothGoogLeNet().state_dict(), "opt": opt, "progress": None, "aux": None}, path)
    return path


@pytest.mark.parametrize("loss,distance,family", [("margin", "euclidean", "ranking"),
                                                  ("arcface", "cosine", "classification"),
                                                  ("softtriplet", "cosine", "classification"),
                                                  ("histogram", "euclidean", "other")])
def test_roth_checkpoint_takes_its_loss_option(tmp_path, loss, distance, family):
    _, cfg, info = load_checkpoint(_save_roth(tmp_path / "checkpoint.pth.tar", loss))
    extra = info["extra"]
    assert cfg.get("loss") is None and info["extra"]["roth_options"]["loss"] == loss
    assert not is_untrained(cfg, extra)
    got, source = distance_and_source(cfg, extra)
    assert got == distance == distance_for_config(cfg, extra)
    assert source == ("Roth's loss option" if loss != "histogram" else
                      "default: Roth's loss 'histogram' has no known distance")
    assert family_for_config(cfg, extra) == family


def test_pml_pair_is_trained_with_an_unknown_loss(tmp_path):
    from torchvision.models import resnet18

    trunk = resnet18(weights=None)
    trunk.fc = nn.Identity()
    folder = tmp_path / "saved_models"
    folder.mkdir()
    torch.save(trunk.state_dict(), folder / "trunk_best1.pth")
    torch.save({"weight": torch.randn(8, 512), "bias": torch.zeros(8)}, folder / "embedder_best1.pth")
    _, cfg, info = load_checkpoint(folder)
    assert not is_untrained(cfg, info["extra"])
    assert distance_and_source(cfg, info["extra"]) == ("euclidean", "default: the checkpoint names no loss")
    assert family_for_config(cfg, info["extra"]) == "other"


def test_untrained_networks_and_plain_configs():
    from embedscope.models import build_pretrained

    _, base, info = build_pretrained("resnet18", head="random", embed_dim=8)
    assert is_untrained(base, info["extra"]) and family_for_config(base) == "untrained"
    assert distance_and_source(base) == ("euclidean", "untrained network")
    assert is_untrained({}) and family_for_config({}) == "untrained"
    assert family_for_config({"loss": "arcface", "epochs": 0}) == "untrained"
    assert distance_for_config({"loss": "arcface", "epochs": 5}, {"epoch": 0}) == "euclidean"
    assert distance_for_config({"loss": "arcface", "epochs": 5}) == "cosine"
    assert distance_and_source({"distance": "cosine"}) == ("cosine", "config")  # a trained model naming it
    assert distance_and_source({"loss": "margin"}) == ("euclidean", "loss")
