"""Fixes made while integrating the forty-third session's audits (each test failed before its fix)."""

from __future__ import annotations

import pytest
import torch

from embedscope.errors import EmbedscopeError
from embedscope.models import build_model, default_config
from embedscope.models.checkpoint import load_backbone_weights, load_checkpoint, read_checkpoint


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("value", ["no", "False", "0", 2, None])
def test_unsafe_pickle_must_be_a_bool_before_any_code_runs(tmp_path, value):
    # unsafe_pickle="no" (a truthy string) allowed the full unpickler: the file's payload ran
    cfg = default_config("digits_cnn", embed_dim=8)
    marker = tmp_path / "ran"
    p = tmp_path / "evil.pt"
    torch.save({"state_dict": build_model(cfg).state_dict(), "config": cfg, "extra": {"obj": _Payload(marker)}}, p)
    for call in (lambda: read_checkpoint(p, unsafe_pickle=value), lambda: load_checkpoint(p, unsafe_pickle=value),
                 lambda: load_backbone_weights(build_model(cfg), p, unsafe_pickle=value)):
        with pytest.raises(EmbedscopeError, match="unsafe_pickle must be True or False"):
            call()
    assert not marker.exists()


def test_maps_files_sharing_no_image_count_each_in_its_number():
    # "(a: 1, b: 2 images" read as if both counts were of images in the plural, "1 images"
    from types import SimpleNamespace

    from embedscope.store.saliency import match_rows

    def maps(name, paths):
        return SimpleNamespace(name=name, paths=paths, labels=[0] * len(paths), class_names=["c"], n=len(paths),
                               map_shape=(8, 8))

    with pytest.raises(EmbedscopeError) as e:
        match_rows([maps("a", ["x/1.png"]), maps("b", ["y/1.png", "y/2.png"])])
    assert "(a: 1 image, b: 2 images" in str(e.value)


def test_a_safetensors_name_that_is_no_safetensors_file_says_so(tmp_path):
    p = tmp_path / "w.safetensors"
    p.write_bytes(b"<html>a download error page</html>")
    with pytest.raises(EmbedscopeError, match="not a safetensors file"):
        read_checkpoint(p)
    q = tmp_path / "w.pt"
    q.write_bytes(p.read_bytes())
    with pytest.raises(EmbedscopeError, match="neither torch.save's zip format"):
        read_checkpoint(q)


def test_a_paths_file_of_two_joined_files_drops_the_second_byte_order_mark(tmp_path):
    from embedscope.fileio import read_paths_file

    p = tmp_path / "paths.txt"
    p.write_bytes("\ufeffdigits/0005\n".encode() + "\ufeffdigits/0007\r\n\ufeff# a comment\n".encode())
    assert read_paths_file(p) == ["digits/0005", "digits/0007"]


def test_the_neighbours_figure_title_of_one_retrieval_is_singular():
    import matplotlib.pyplot as plt
    import numpy as np

    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz.neighbours import draw_neighbours

    img = np.zeros((8, 8))
    for k in (1, 2):
        ex = NeighbourExamples(np.array(["q"]), np.array(["0"]), np.array([["r"] * k]), np.array([["0"] * k]),
                               np.array([[0.5] * k]), np.array([[True] * k]), "test", "test", "cosine")
        fig = draw_neighbours(ex, [img], [[img] * k])
        title = fig._suptitle.get_text()
        plt.close(fig)
        assert title.startswith("top-1 retrieval: " if k == 1 else "top-2 retrievals: "), title


def test_a_setting_no_maps_file_records_is_no_note(tmp_path):
    # three maps files written from Python, none recording its transform or data set: a note per file said that
    # whether it matched "the other files'" was not known (the other files did not record it either)
    from test_audit43_saliency import _maps_file

    from embedscope.saliency.run import agreement_of_files

    full = {"order": "paper", "n_samples": 5, "noise": 0.15}
    files = [_maps_file(tmp_path / f"{n}.h5", ["x/1", "x/2"], k, full) for k, n in enumerate("abc")]
    assert agreement_of_files(files)["notes"] == []
    lone = _maps_file(tmp_path / "d.h5", ["x/1", "x/2"], 3, {**full, "dataset": "digits"})
    notes = agreement_of_files([*files, lone])["notes"]
    assert len(notes) == 3 and all("does not record its data set" in n for n in notes), notes
