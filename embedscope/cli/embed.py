"""embedscope embed CKPT --dataset NAME -o OUT.h5"""

from __future__ import annotations

from embedscope import names
from embedscope.cli.common import (
    add_device,
    add_force,
    add_model_sources,
    add_no_progress,
    add_num_workers,
    dataset_name,
    positive_int,
    random_backbone_note,
)


def add_parser(sub, parents):
    p = sub.add_parser("embed", parents=parents, help="embed a data set with a checkpoint into an HDF5 file",
                       description="Embed a data set's images with a checkpoint (evaluation transforms, batched, "
                       "GPU when present) and write embeddings, labels, paths, split and provenance to HDF5.")
    p.add_argument("checkpoint", nargs="?",
                   help="checkpoint: embedscope format, a bare state dict (with --arch), Roth et al.'s "
                   "checkpoint*.pth.tar (Revisiting_Deep_Metric_Learning_PyTorch, Deep-Metric-Learning-Baselines), "
                   "or a pytorch-metric-learning / powerful-benchmarker saved_models folder; omit it with "
                   "--trunk/--embedder, or with --arch for an ImageNet baseline (docs/checkpoint.md)")
    p.add_argument("--dataset", required=True, type=dataset_name,
                   help="digits, shapes (make-shapes), cub200, cars196, sop or imagefolder")
    p.add_argument("--root", help="data set folder (official layout) (default: the checkpoint's, when it was trained "
                   "with train --root on this data set); not needed for digits, nor for shapes (the default "
                   "set is generated once and cached)")
    p.add_argument("--split", default="all", choices=["train", "test", "all"], help="rows to embed (default: all)")
    p.add_argument("--train-classes", type=positive_int, metavar="N",
                   help="the first N classes (sorted) form the training split (default: the checkpoint's, when it was "
                   "trained with train --train-classes on this data set, else the data set's own split)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.h5", help="output HDF5 file")
    p.add_argument("--arch", help="architecture of a bare state dict, a trunk or an ImageNet baseline: "
                   f"{', '.join(names.ARCHS)}, any torchvision classification model, timm:NAME")
    p.add_argument("--ema", action="store_true",
                   help="use the checkpoint's EMA weights (timm's state_dict_ema, else model_ema) instead of its "
                   "state_dict, for a checkpoint or --weights; a file without them is an error")
    add_model_sources(p)
    p.add_argument("--batch-size", type=positive_int, metavar="B",
                   help="images per forward pass; each split is embedded on its own (default: the batches of train's "
                   "evaluation, 256 for the digits, 128 otherwise, so that a trained checkpoint's rho and R@1 are its "
                   "log's to the last bit; another size changes the embeddings' last bits, and rho's last digits)")
    p.add_argument("--amp", default="none", choices=["none", "bf16"],
                   help="none = float32, as evaluations are reported; bf16 = bfloat16 autocast on CUDA "
                   "(faster; rows differ from float32 by ~1e-3 to 1e-2, enough to reorder near ties); the CPU "
                   "always runs float32. The file records it (attribute 'precision') (default: none)")
    add_num_workers(p)
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="allow a checkpoint that needs arbitrary code to unpickle (only for trusted files)")
    add_no_progress(p)
    add_device(p)
    add_force(p)
    p.set_defaults(func=run)
    return p




def run(args) -> int:
    from embedscope.cli.output import check_suffix, refuse_inputs
    from embedscope.embed import embed_to_file
    from embedscope.text import safe

    refuse_inputs([args.output], [args.checkpoint, args.weights, args.trunk, args.embedder])
    check_suffix(args.output, "-o", ".h5")  # the embedding file is HDF5 (.h5 or .hdf5)
    # given only when asked for (embed_to_file passes them to embedscope.models.load_model)
    model_options = {k: v for k, v in (("ema", args.ema or None), ("transform_input", args.transform_input))
                     if v is not None}
    out = embed_to_file(
        args.checkpoint, args.dataset, args.output, root=args.root, split=args.split, arch=args.arch,
        train_classes=args.train_classes, batch_size=args.batch_size, num_workers=args.num_workers,
        device=args.device, unsafe_pickle=args.unsafe_pickle, force=args.force, progress=not args.no_progress,
        weights=args.weights, head=args.head, embed_dim=args.embed_dim, head_seed=args.head_seed,
        trunk=args.trunk, embedder=args.embedder, amp=args.amp == "bf16", image_size=args.image_size,
        resize=args.resize, echo=lambda s: print(safe(s), flush=True), **model_options,
    )
    note = random_backbone_note(args)
    if note:
        print(note)
    print(f"wrote {safe(out)}")
    return 0
