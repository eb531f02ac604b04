import os

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

matplotlib.use("Agg", force=True)

_approx = pytest.approx


def _strict_approx(expected, rel=None, abs=None, nan_ok=False):
    """``pytest.approx`` that refuses to compare a tiny non-zero value under its default ``abs=1e-12``:
    that tolerance passed anything near a π of 1e-12, a uniformity of −3.7e-12 or a p-value of
    5.6e-184, whatever ``rel`` said. Such a comparison must name its ``abs`` (``abs=0``: relative only)."""
    if abs is None:
        try:
            v = np.abs(np.asarray(list(expected.values()) if isinstance(expected, dict) else expected, dtype=float))
        except (TypeError, ValueError):
            v = None
        if v is not None and np.any((v > 0) & (v < 1e-9)):
            raise AssertionError(f"pytest.approx of a value below 1e-9 ({float(np.min(v[v > 0])):.3g}) under the "
                                 "default abs=1e-12: give abs= (abs=0 compares relatively)")
    return _approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)


pytest.approx = _strict_approx

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one thread each avoids oversubscription, in the workers and in the
    # processes their tests start (embedscope train/embed/study..., notebooks, docs' shell blocks):
    # torch's and BLAS's thread pools read these when they start; a 2-thread pool per process on 2
    # busy cores spent 3-4x the CPU time of one thread on the small models the tests train
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass

# `make test` (--dist loadfile --no-loadscope-reorder) hands each xdist worker whole files in
# collection order: the longest files first, so that short ones fill the end and both workers finish
# together (xdist's own order, by number of tests, left the 2-test README walk-through, one of the
# longest, to the very end). Longest first by a `make test` run's per-file time; other files follow
# in their usual order. A stale list costs only balance.
LONGEST_FILES = (  # (2026-11-30, after the tests of SLOW_IN_MAKE_TEST below left it)
    "test_notebooks_exec", "test_readme", "test_docs_examples", "test_trainer", "test_retrieval_collapsed",
    "test_audit_retrieval", "test_audit25_maps", "test_grid", "test_adapters", "test_audit25_study",
    "test_viz_yoked_maps", "test_audit27_cli", "test_benchmarks_cli", "test_properties_collapsed", "test_tsne",
    "test_audit23_viz_evaluate", "test_audit24_properties", "test_cli_foundation", "test_audit_study_stats",
    "test_audit25_search", "test_audit_matching", "test_escapes", "test_audit_figures", "test_audit24_options_training",
    "test_audit23_train_saliency", "test_audit24_options_maps", "test_audit_state", "test_audit21_checkpoints",
    "test_audit25_evaluate", "test_audit27_viz", "test_cli_audit_fixes", "test_audit23_scatter_tsne",
)


# Tests that `make test` leaves to `make test-slow` (pytest -m slow): each is a second path of a kind a faster
# test of `make test` keeps (another signal, parameter or worker count, a figure's other size, the GPU scripts
# on the CPU but one, a grid stopped or killed mid-way), or a terminal or robustness check of many CPU-seconds
# on the test machine's 2 cores. Chosen by `pytest --durations` of `make test` (2026-11-30: 946 s of pytest on
# a machine that had run it in ~600 s, over the 15-minute budget with the set-up): 2.5-53 s each, ~535 s in
# all. A name listed here that no longer names a collected test is an error (a renamed test would slip back
# into `make test`, or out of both).
SLOW_IN_MAKE_TEST = (
    "test_audit_ux2.py::test_stopped_parallel_grid_leaves_no_empty_run_folders_and_resumes",
    "test_audit_ux2.py::test_ctrl_c_of_embed_with_workers_is_one_line",
    "test_audit_ux2.py::test_study_shows_a_bar_on_a_terminal_and_its_lines_in_a_log",
    "test_study.py::test_yaml_list_on_two_dask_workers_equals_serial[processes]",  # [threads] stays
    "test_study.py::test_figures_without_a_forked_child_are_the_same",
    "test_retrieval.py::test_counting_pass_is_used_at_scale_and_equals_the_candidate_path",
    "test_audit23_viz_evaluate.py::test_spectrum_cli_figure_with_long_names_and_dimensions",
    "test_audit23_viz_evaluate.py::test_spectrum_legend_covers_no_curve[True-dims0]",
    "test_audit23_viz_evaluate.py::test_spectrum_legend_covers_no_curve[True-dims2]",
    "test_audit23_train_saliency.py::test_parallel_train_grid_starts_the_runs_after_a_diverged_one",
    "test_audit_ux.py::test_train_evaluation_shows_a_bar_on_a_terminal_only",
    "test_audit_ux.py::test_make_shapes_reports_writing_the_images",
    "test_grid.py::test_grid_workers_a_killed_worker_is_an_error_not_a_hang",
    "test_grid.py::test_more_workers_than_cpus_says_they_share_them",
    "test_grid.py::test_grid_workers_a_failed_run_keeps_the_finished_rows",
    "test_study_scheduler.py::test_study_on_an_existing_scheduler_equals_serial",
    "test_augment_draws.py::test_workers_and_resume_do_not_change_the_draws",
    "test_audit26_report.py::test_notebook03_quotes_the_untrained_pair_of_the_images_it_picks",
    "test_benchmarks_cli.py::test_gpu_benchmarks_run_on_the_cpu[saliency.py-args0]",  # retrieval_cuda stays
    "test_benchmarks_cli.py::test_gpu_benchmarks_run_on_the_cpu[embed_throughput.py-args1]",
    "test_benchmarks_cli.py::test_gpu_benchmarks_run_on_the_cpu[train_throughput.py-args2]",
    "test_benchmarks_cli.py::test_gpu_benchmarks_run_on_the_cpu[conv_precision.py-args4]",
    "test_benchmarks_cli.py::test_gpu_commands_say_in_one_line_that_there_is_no_gpu[retrieval_scaling.py-args0]",
    "test_benchmarks_cli.py::test_gpu_commands_say_in_one_line_that_there_is_no_gpu[saliency.py-args1]",
    "test_benchmarks_cli.py::test_gpu_commands_say_in_one_line_that_there_is_no_gpu[retrieval_cuda.py-args4]",
    "test_benchmarks_cli.py::test_gpu_commands_say_in_one_line_that_there_is_no_gpu[conv_precision.py-args5]",
    "test_benchmarks_cli.py::test_benchmark_offers_quick[embed_throughput]",
    "test_audit35_cli.py::test_a_damaged_file_names_itself_in_the_cli",
    "test_audit27_cli.py::test_a_resumable_command_stops_at_a_full_stdout",  # a closed pipe stays
    "test_knn.py::test_same_set_search_past_65536_rows[None]",  # [1000] stays
    "test_tsne_threads.py::test_tsne_command_writes_the_same_coordinates_with_n_jobs_1_and_2",
    "test_tsne_threads.py::test_single_map_and_kl_the_same_for_any_thread_count[fft]",  # [bh] stays
    "test_audit_determinism.py::test_tsne_of_1000_points_same_map_whatever_the_thread_count",
    "test_viz_yoked_maps.py::test_zoom_row_under_each_row_of_maps[6]",
    "test_viz_yoked_maps.py::test_long_names_and_zoom_titles_neither_collide_nor_leave_the_figure[5]",
    "test_ieee_float32.py::test_ieee_inside_and_the_callers_setting_after[new_cuda]",
    "test_ieee_float32.py::test_ieee_inside_and_the_callers_setting_after[legacy_high]",
    "test_ieee_float32.py::test_ieee_inside_and_the_callers_setting_after[new_mkldnn]",
    "test_ieee_float32.py::test_ieee_inside_and_the_callers_setting_after[legacy_medium]",
    "test_cli_foundation.py::test_killed_embed_leaves_no_output[2]",  # [15] stays
    "test_cli_foundation.py::test_killed_embed_leaves_no_output[9]",
    "test_cli_foundation.py::test_signal_swallowed_by_a_library_still_stops[2]",
    "test_properties_collapsed.py::test_long_lists_and_deep_counts_on_every_path[cosine-half]",
    "test_properties_collapsed.py::test_long_lists_and_deep_counts_on_every_path[euclidean-three]",
    "test_audit26_report.py::test_spectrum_index_axis_has_whole_number_ticks",
    "test_audit25_escapes.py::test_data_loader_error_line_names_the_class_folder_once[line-break-0]",
    "test_cli_audit_fixes.py::test_neighbours_says_when_the_split_has_fewer_queries_than_asked",
    "test_audit23_viz_evaluate.py::test_spectrum_legend_of_flat_long_spectra_goes_beside_the_panel",
    "test_audit23_viz_evaluate.py::test_spectrum_legend_covers_no_curve[False-dims1]",
    "test_audit23_viz_evaluate.py::test_spectrum_legend_covers_no_curve[False-dims2]",
    "test_audit36_train.py::test_grid_row_summarised_again_takes_the_settings_of_the_run_as_trained",
    "test_audit23_study.py::test_a_deleted_figure_is_said_in_the_report_and_drawn_again_by_the_study",
    "test_audit24_options_maps.py::test_yoke_alpha_zero_with_centroids_says_yoke_changes_nothing",
    "test_audit24_options_maps.py::test_yoke_of_one_file_twice_says_so",
    "test_tsne_threads.py::test_yoked_maps_kl_and_objective_the_same_for_any_thread_count",
    "test_audit_state.py::test_killed_make_shapes_force_leaves_no_set_to_load",
    "test_study_scheduler.py::test_relative_paths_reach_a_worker_in_another_folder",
    "test_cli_foundation.py::test_embed_log_has_no_redraws",
    "test_audit29_small.py::test_two_panel_spectrum_legends_go_below_the_panels_not_between_them[3]",
    "test_audit23_scatter_tsne.py::test_cli_tsne_says_the_perplexity_was_capped[split1]",
    "test_audit_determinism.py::test_checkpoint_records_the_compute_threads_of_each_start_and_resume",
    "test_audit27_study2.py::test_a_train_grid_folders_names_are_unchanged",
    "test_audit26_report.py::test_spectrum_figure_says_the_class_spectra_are_centred",
    "test_yoked_maps.py::test_command_maps_three_files",
    "test_trainer.py::test_train_grid_skips_finished",
    "test_audit25_study.py::test_an_objective_with_a_failed_seed_says_over_how_many_seeds_it_is",
    "test_audit26_train.py::test_an_epochs_logged_r1_and_rho_are_those_of_its_checkpoint",
    "test_audit_figures.py::test_saliency_pairs_retrieval_caption_clears_the_query_map",
    "test_audit23_train_saliency.py::test_an_epoch_whose_test_images_all_embed_at_one_point_says_so",
    "test_augment_draws.py::test_loader_workers_start_once_per_run",
    "test_audit_ux2.py::test_a_data_loader_worker_says_nothing_when_its_parent_stops_mid_batch",
    "test_escapes.py::test_figures_draw_control_characters_escaped_without_warnings[yoked]",
    # (2026-12-01: +150 tests this session; `make test` under load 868 s of pytest: second paths of kinds kept)
    "test_audit_retrieval.py::test_fast_paths_with_many_ties_match_brute_force[euclidean]",  # [cosine] stays
    "test_audit35_cli.py::test_a_file_damaged_inside_is_one_line_naming_it",  # the maps file's stays
    "test_viz_yoked_maps.py::test_long_names_and_zoom_titles_neither_collide_nor_leave_the_figure[4]",  # [2] stays
    "test_viz_yoked_maps.py::test_k_maps_share_window_colours_and_labels[6]",  # [5] stays
    "test_audit23_viz_evaluate.py::test_spectrum_legend_covers_no_curve[True-dims1]",  # [True-dims3] stays
    "test_retrieval_collapsed.py::test_nearly_collapsed_two_classes_and_deep_mAP[euclidean]",  # [cosine] stays
    "test_retrieval_collapsed.py::test_one_point_skewed_classes_the_counting_pass[euclidean]",  # [cosine] stays
    "test_audit_study_stats.py::test_bootstrap_equals_a_hand_written_one_with_degenerate_resamples[6]",
    "test_audit25_escapes.py::test_train_note_names_the_smallest_class_once[backslash-n]",  # [line-break] stays
    "test_audit26_search.py::test_outliers_of_large_classes_are_ranked_apart_within_the_row_budget[euclidean]",
    "test_benchmarks_cli.py::test_benchmark_offers_quick[train_throughput]",
    "test_audit27_train.py::test_resume_of_a_run_saved_before_the_option_keeps_gamma_beta_fixed",
    "test_audit27_train.py::test_grid_finishes_a_run_extended_then_interrupted",
)


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    slow = {f"tests/{name}" for name in SLOW_IN_MAKE_TEST}
    files = set()
    for item in items:
        files.add(item.nodeid.split("::")[0])
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
            slow.discard(item.nodeid)
    missing = sorted(n for n in slow if n.split("::")[0] in files)
    if missing:
        raise pytest.UsageError(f"conftest.SLOW_IN_MAKE_TEST names no collected test: {missing}")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a run in one process keeps the usual order
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}

    def key(item):  # stable: the tests of a file keep their order
        return rank.get(item.path.stem, len(rank))

    items.sort(key=key)


def snapshot(folder, *, inodes: bool = False):
    """Every file (hidden ones included) and folder under ``folder``: path -> sha256 (with
    ``inodes``: (sha256, inode), to tell a file put back from a new copy) or 'dir'."""
    import hashlib

    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            state[os.path.relpath(os.path.join(root, name), folder)] = "dir"
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            state[os.path.relpath(p, folder)] = (digest, os.lstat(p).st_ino) if inodes else digest
    return state


def save_digits_checkpoint(path, embed_dim: int = 8, seed: int = 0):
    """An untrained digits_cnn checkpoint at ``path`` (torch seeded: the same weights each time)."""
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=embed_dim)
    save_checkpoint(path, build_model(cfg), cfg)
    return path


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A folder with two untrained digits_cnn checkpoints, net1.pt and net2.pt (seeds 1 and 2)."""
    d = tmp_path_factory.mktemp("ck")
    for seed in (1, 2):
        save_digits_checkpoint(d / f"net{seed}.pt", seed=seed)
    return d


@pytest.fixture(scope="module")
def emb_cache(tmp_path_factory):
    """An embedding cache folder for the studies of one test module."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def seen(monkeypatch):
    """The retrieval passes whose union-of-windows count ran (knn.tie_window_before): 'rows',
    'count', 'candidates' (test_retrieval_collapsed, test_retrieval_centred)."""
    import embedscope.metrics.search.counting as counting
    import embedscope.metrics.search.ranks as ranks
    import embedscope.metrics.search.rows as rows

    out = []
    for name, mod in (("rows", rows), ("count", counting), ("candidates", ranks)):
        real = mod.tie_window_before

        def spy(*a, _real=real, _name=name, **k):
            out.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(mod, "tie_window_before", spy)
    return out


#: test modules written for the numpy retrieval passes (rows, counting, candidate lists): they run with the
#: compiled fused pass off, so that those passes stay tested on the small sets the fused pass now ranks
#: (tests/test_fused.py compares the two)
NUMPY_PASS_MODULES = {
    "test_audit26_properties_outliers", "test_audit26_search", "test_audit30_floor", "test_audit30_search",
    "test_audit31_search", "test_audit32_bound", "test_audit_retrieval", "test_candidate_pipeline",
    "test_device_count", "test_retrieval", "test_retrieval_centred", "test_retrieval_collapsed",
    "test_retrieval_large_classes", "test_search_bf16", "test_search_ranks",
}


@pytest.fixture(autouse=True)
def _numpy_passes_where_tested(request, monkeypatch):
    if request.module.__name__.rsplit(".", 1)[-1] in NUMPY_PASS_MODULES:
        from embedscope.metrics.search import fused

        monkeypatch.setattr(fused, "USE_FUSED", False)
