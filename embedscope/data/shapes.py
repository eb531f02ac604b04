"""``shapes``: a property-controlled set of rendered 3-D scenes (docs/methods.md §9, the stand-in for Kobs' renders).

Kobs et al. (ICCV 2021, §4) rendered 100,000 cars with every image property drawn independently
and uniformly at random, so that Normalized R-Precision can tell which property an embedding
clusters. No 3-D models or downloads exist here, so embedscope renders its own scenes: one object
on a floor under a directional "sun", ray-marched from signed distance functions (SDFs) in torch,
with Lambertian shading and soft cast shadows.

Every image records its properties (all drawn independently and uniformly from the value lists in
:data:`PROPERTY_VALUES`):

==============  ======  ==========================================================================
property        values  meaning
==============  ======  ==========================================================================
``shape``       24      the object (= the class); 12 training shapes, 12 unseen test shapes
``obj_hue``     10      object colour hue 0.0 ... 0.9
``obj_sat``     4       object colour saturation
``obj_val``     4       object colour value (brightness)
``bg_hue``      8       floor / backdrop hue
``yaw``         8       object rotation about the vertical axis, 0 ... 315 degrees
``scale``       4       object size factor
``cam_elev``    4       camera elevation (degrees above the floor)
``light_elev``  3       sun elevation (degrees): shading contrast and shadow length
``light_azim``  8       sun azimuth (degrees, 0 = from the camera's side): shading side, shadow direction
==============  ======  ==========================================================================

The set is deterministic from ``(n, size, seed)``: properties come from ``numpy.random.default_rng(seed)``
and the renderer has no randomness. :func:`load_shapes` generates it on demand and caches it on disk
(``--root DIR`` or a cache folder keyed by the generation parameters); ``embedscope make-shapes -o DIR``
writes PNGs and ``properties.csv`` for inspection (that folder is also a valid ``--root``).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np

from embedscope.data.base import ImageDataset, check_root_given, class_split
from embedscope.device import torch_threads
from embedscope.errors import EmbedscopeError
from embedscope.text import quoted

NAME = "shapes"
RENDER_VERSION = 1  # bump when the images change: it is part of the cache key
#: the whole properties.csv of a folder while make-shapes --force replaces its set
INCOMPLETE = "# embedscope make-shapes: writing this set was interrupted; write it again with --force\n"
DEFAULT_N = 4800
DEFAULT_SIZE = 64
DEFAULT_SEED = 0
TRAIN_SHAPES = 12

PROPERTY_VALUES: dict[str, tuple] = {
    "obj_hue": tuple(round(0.1 * i, 1) for i in range(10)),
    "obj_sat": (0.3, 0.5, 0.7, 0.9),
    "obj_val": (0.45, 0.6, 0.75, 0.9),
    "bg_hue": tuple(round(i / 8, 3) for i in range(8)),
    "yaw": tuple(45 * i for i in range(8)),
    "scale": (0.7, 0.8, 0.9, 1.0),
    "cam_elev": (10, 22, 34, 46),
    "light_elev": (20, 45, 70),
    "light_azim": tuple(45 * i for i in range(8)),
}

# ----------------------------------------------------------------------------- SDF primitives
# p: torch tensor (..., 3) in object space; every function returns (...,) signed distances.


def _len(*xs):
    import torch

    return torch.sqrt(sum(x * x for x in xs))


def sd_sphere(p, c, r):
    return _len(p[..., 0] - c[0], p[..., 1] - c[1], p[..., 2] - c[2]) - r


def sd_box(p, c, b, r=0.0):
    """Axis-aligned box centred at c with half sizes b, edges rounded by r."""
    import torch

    q = [torch.abs(p[..., i] - c[i]) - (b[i] - r) for i in range(3)]
    outside = _len(*(torch.clamp(x, min=0) for x in q))
    inside = torch.clamp(torch.maximum(torch.maximum(q[0], q[1]), q[2]), max=0)
    return outside + inside - r


def sd_capped_cone(p, c, h, r1, r2):
    """Vertical capped cone / frustum / cylinder: half height h, radius r1 at the bottom, r2 at the top."""
    import torch

    qx = _len(p[..., 0] - c[0], p[..., 2] - c[2])
    qy = p[..., 1] - c[1]
    k2x, k2y = r2 - r1, 2.0 * h
    cax = qx - torch.minimum(qx, torch.where(qy < 0, torch.full_like(qx, r1), torch.full_like(qx, r2)))
    cay = torch.abs(qy) - h
    t = torch.clamp(((r2 - qx) * k2x + (h - qy) * k2y) / (k2x * k2x + k2y * k2y), 0.0, 1.0)
    cbx = qx - r2 + k2x * t
    cby = qy - h + k2y * t
    s = torch.where((cbx < 0) & (cay < 0), -1.0, 1.0)
    return s * torch.sqrt(torch.minimum(cax * cax + cay * cay, cbx * cbx + cby * cby))


def sd_cylinder(p, c, h, r):
    return sd_capped_cone(p, c, h, r, r)


def sd_capsule(p, a, b, r):
    import torch

    pa = [p[..., i] - a[i] for i in range(3)]
    ba = [b[i] - a[i] for i in range(3)]
    h = torch.clamp(sum(pa[i] * ba[i] for i in range(3)) / sum(x * x for x in ba), 0.0, 1.0)
    return _len(*(pa[i] - ba[i] * h for i in range(3))) - r


def sd_torus_standing(p, c, R, r):
    """A ring standing upright in the x-y plane (centre c, ring radius R, tube radius r)."""
    qx = _len(p[..., 0] - c[0], p[..., 1] - c[1]) - R
    return _len(qx, p[..., 2] - c[2]) - r


def sd_octahedron(p, c, s):
    import torch

    return (torch.abs(p[..., 0] - c[0]) + torch.abs(p[..., 1] - c[1]) + torch.abs(p[..., 2] - c[2]) - s) * 0.57735027


def sd_hex_prism_vertical(p, c, r, h):
    """Hexagonal prism with a vertical axis: apothem r, half height h."""
    import torch

    x = torch.abs(p[..., 0] - c[0])
    z = torch.abs(p[..., 2] - c[2])
    y = p[..., 1] - c[1]
    kx, kz, kk = -0.8660254, 0.5, 0.57735
    dd = 2.0 * torch.clamp(kx * x + kz * z, max=0.0)
    x = x - dd * kx
    z = z - dd * kz
    dx = _len(x - torch.clamp(x, -kk * r, kk * r), z - r) * torch.sign(z - r)
    dy = torch.abs(y) - h
    return torch.clamp(torch.maximum(dx, dy), max=0) + _len(torch.clamp(dx, min=0), torch.clamp(dy, min=0))


def sd_pyramid(p, c, a, h):
    """Square pyramid: base centre c (on its floor), base half width a, height h (a bound SDF)."""
    import torch

    x = torch.abs(p[..., 0] - c[0])
    z = torch.abs(p[..., 2] - c[2])
    y = p[..., 1] - c[1]
    n = math.hypot(h, a)
    side = torch.maximum(h * x + a * y, h * z + a * y) / n - a * h / n
    return torch.maximum(side, -y)


def sd_gable(p, c, hw, y0, y1, hz):
    """A gable roof / wedge along z: eaves at (+-hw, y0), ridge at (0, y1), half length hz (bound SDF)."""
    import torch

    x = torch.abs(p[..., 0] - c[0])
    y = p[..., 1] - c[1]
    nx, ny = (y1 - y0), hw
    n = math.hypot(nx, ny)
    side = (nx * x + ny * y - (nx * hw + ny * y0)) / n
    return torch.maximum(torch.maximum(side, y0 - y), torch.abs(p[..., 2] - c[2]) - hz)


def _union(*ds):
    import torch

    out = ds[0]
    for d in ds[1:]:
        out = torch.minimum(out, d)
    return out


def _cut(a, b):
    import torch

    return torch.maximum(a, -b)


def _inter(a, b):
    import torch

    return torch.maximum(a, b)


# ----------------------------------------------------------------------------- the 24 shapes
# Object space: the object stands on the floor y = 0, fits in |x|, |z| <= 0.6 and y <= 1.25 (bounding
# sphere of radius 1 about (0, 0.6, 0)).


def _sphere(p):
    return sd_sphere(p, (0, 0.55, 0), 0.55)


def _cube(p):
    return sd_box(p, (0, 0.45, 0), (0.45, 0.45, 0.45), 0.03)


def _cylinder(p):
    return sd_cylinder(p, (0, 0.5, 0), 0.5, 0.4)


def _cone(p):
    return sd_capped_cone(p, (0, 0.6, 0), 0.6, 0.5, 0.0)


def _ring(p):
    return sd_torus_standing(p, (0, 0.6, 0), 0.45, 0.14)


def _capsule(p):
    return sd_capsule(p, (-0.45, 0.25, 0), (0.45, 0.25, 0), 0.25)


def _pyramid(p):
    return sd_pyramid(p, (0, 0, 0), 0.55, 0.95)


def _pillar(p):
    return sd_box(p, (0, 0.62, 0), (0.18, 0.62, 0.18), 0.02)


def _snowman(p):
    return _union(sd_sphere(p, (0, 0.33, 0), 0.33), sd_sphere(p, (0, 0.82, 0), 0.22))


def _table(p):
    parts = [sd_box(p, (0, 0.66, 0), (0.55, 0.05, 0.35), 0.01)]
    for sx in (-1, 1):
        for sz in (-1, 1):
            parts.append(sd_box(p, (0.47 * sx, 0.31, 0.27 * sz), (0.05, 0.31, 0.05)))
    return _union(*parts)


def _lshape(p):
    return _union(sd_box(p, (0.1, 0.17, 0), (0.45, 0.17, 0.22), 0.02),
                  sd_box(p, (-0.2, 0.6, 0), (0.15, 0.6, 0.22), 0.02))


def _cross(p):
    return _union(sd_box(p, (0, 0.62, 0), (0.1, 0.62, 0.1), 0.01),
                  sd_box(p, (0, 0.85, 0), (0.5, 0.1, 0.1), 0.01))


def _dumbbell(p):
    return _union(sd_sphere(p, (-0.42, 0.26, 0), 0.26), sd_sphere(p, (0.42, 0.26, 0), 0.26),
                  sd_capsule(p, (-0.42, 0.26, 0), (0.42, 0.26, 0), 0.09))


def _mushroom(p):
    cap = _inter(sd_sphere(p, (0, 0.45, 0), 0.55), 0.5 - p[..., 1])
    return _union(sd_cylinder(p, (0, 0.3, 0), 0.3, 0.14), cap)


def _cup(p):
    body = _cut(sd_cylinder(p, (0, 0.38, 0), 0.38, 0.36), sd_cylinder(p, (0, 0.5, 0), 0.4, 0.29))
    handle = sd_torus_standing(p, (0.38, 0.4, 0), 0.18, 0.05)
    return _union(body, _cut(handle, sd_cylinder(p, (0, 0.38, 0), 0.4, 0.33)))


def _arch(p):
    import torch

    hole = _len(p[..., 0], p[..., 1]) - 0.3
    return _cut(sd_box(p, (0, 0.45, 0), (0.55, 0.45, 0.2), 0.02), torch.maximum(hole, -p[..., 1] - 1))


def _octahedron(p):
    return sd_octahedron(p, (0, 0.6, 0), 0.6)


def _nut(p):
    return _cut(sd_hex_prism_vertical(p, (0, 0.25, 0), 0.5, 0.25), sd_cylinder(p, (0, 0.25, 0), 0.4, 0.24))


def _wedge(p):
    return sd_gable(p, (0, 0, 0), 0.55, 0.0, 0.8, 0.3)


def _stairs(p):
    return _union(sd_box(p, (0, 0.13, 0), (0.5, 0.13, 0.3)),
                  sd_box(p, (0.17, 0.38, 0), (0.33, 0.12, 0.3)),
                  sd_box(p, (0.34, 0.62, 0), (0.16, 0.12, 0.3)))


def _chair(p):
    parts = [sd_box(p, (0, 0.42, 0), (0.3, 0.04, 0.3)), sd_box(p, (0, 0.82, -0.27), (0.3, 0.36, 0.04))]
    for sx in (-1, 1):
        for sz in (-1, 1):
            parts.append(sd_box(p, (0.26 * sx, 0.2, 0.26 * sz), (0.04, 0.2, 0.04)))
    return _union(*parts)


def _house(p):
    return _union(sd_box(p, (0, 0.32, 0), (0.42, 0.32, 0.32)), sd_gable(p, (0, 0, 0), 0.52, 0.64, 1.05, 0.38))


def _rocket(p):
    fins = _union(sd_box(p, (0, 0.15, 0), (0.38, 0.15, 0.03)), sd_box(p, (0, 0.15, 0), (0.03, 0.15, 0.38)))
    return _union(sd_cylinder(p, (0, 0.5, 0), 0.5, 0.2), sd_capped_cone(p, (0, 1.12, 0), 0.13, 0.2, 0.0), fins)


def _csg(p):
    import torch

    y = p[..., 1] - 0.5
    core = _inter(sd_box(p, (0, 0.5, 0), (0.45, 0.45, 0.45)), sd_sphere(p, (0, 0.5, 0), 0.6))
    holes = _union(_len(y, p[..., 2]) - 0.22, _len(p[..., 0], p[..., 2]) - 0.22, _len(p[..., 0], y) - 0.22)
    return torch.maximum(core, -holes)


# The first TRAIN_SHAPES are the training classes, the rest the unseen test classes; both halves mix
# primitives and combinations.
SHAPES: tuple[tuple[str, Callable], ...] = (
    ("sphere", _sphere), ("cube", _cube), ("cone", _cone), ("ring", _ring),
    ("snowman", _snowman), ("table", _table), ("lshape", _lshape), ("dumbbell", _dumbbell),
    ("cup", _cup), ("octahedron", _octahedron), ("stairs", _stairs), ("house", _house),
    ("cylinder", _cylinder), ("capsule", _capsule), ("pyramid", _pyramid), ("pillar", _pillar),
    ("cross", _cross), ("mushroom", _mushroom), ("arch", _arch), ("nut", _nut),
    ("wedge", _wedge), ("chair", _chair), ("rocket", _rocket), ("csg", _csg),
)
SHAPE_NAMES = tuple(s for s, _ in SHAPES)
PROPERTY_NAMES = ("shape",) + tuple(PROPERTY_VALUES)

# ----------------------------------------------------------------------------- properties


def draw_properties(n: int, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """Independently and uniformly drawn properties of ``n`` scenes (docs/methods.md §9).

    ``shape`` is an index into :data:`SHAPE_NAMES` (the class label); every other property is a
    value of :data:`PROPERTY_VALUES`. Each property is drawn by its own call of one
    ``numpy.random.default_rng(seed)`` stream, in a fixed order, so the set is reproducible.
    """
    if n < 1:
        raise EmbedscopeError(f"shapes: the number of images must be positive, got {n}")
    rng = np.random.default_rng(seed)
    out = {"shape": rng.integers(0, len(SHAPES), n).astype(np.int64)}
    for k, vals in PROPERTY_VALUES.items():
        out[k] = np.asarray(vals)[rng.integers(0, len(vals), n)]
    return out


def _hsv_to_rgb(h, s, v):
    """numpy HSV -> RGB for arrays in [0, 1]."""
    h = np.asarray(h, dtype=np.float64) % 1.0
    s = np.asarray(s, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    i = np.floor(h * 6).astype(int) % 6
    f = h * 6 - np.floor(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    rgb = np.zeros(h.shape + (3,))
    for k in range(6):
        m = i == k
        for c in range(3):
            rgb[..., c] += np.where(m, table[k][c], 0.0)
    return rgb


# ----------------------------------------------------------------------------- renderer
CAM_DIST = 3.4
CAM_TARGET_Y = 0.5
FOV_DEG = 32.0
BOUND_C = (0.0, 0.6, 0.0)
BOUND_R = 1.0
MARCH_STEPS = 72
SHADOW_STEPS = 40
HIT_EPS = 1e-3


def _render_group(shape_fn: Callable, props: dict[str, np.ndarray], size: int, ss: int):
    """Render the scenes of one shape; props are this group's property arrays. Returns float (B, H, W, 3)."""
    import torch

    B = len(props["yaw"])
    res = size * ss
    f32 = torch.float32

    def T(a):
        return torch.as_tensor(np.asarray(a, dtype=np.float32))

    yaw = T(np.deg2rad(props["yaw"]))
    scale = T(props["scale"])
    el = T(np.deg2rad(props["cam_elev"]))
    lel = np.deg2rad(props["light_elev"])
    laz = np.deg2rad(props["light_azim"])
    L = T(np.stack([np.cos(lel) * np.sin(laz), np.sin(lel), np.cos(lel) * np.cos(laz)], 1))  # (B, 3)

    # camera on the +z side at elevation el, looking at (0, CAM_TARGET_Y, 0)
    cam = torch.stack([torch.zeros(B), CAM_TARGET_Y + CAM_DIST * torch.sin(el), CAM_DIST * torch.cos(el)], 1)
    fwd = torch.stack([torch.zeros(B), -torch.sin(el), -torch.cos(el)], 1)
    right = torch.tensor([1.0, 0.0, 0.0]).expand(B, 3)
    up = torch.cross(right, fwd, dim=1)
    half = math.tan(math.radians(FOV_DEG) / 2)
    u = (torch.arange(res, dtype=f32) + 0.5) / res * 2 - 1
    uu = u[None, :].expand(res, res)  # x to the right
    vv = -u[:, None].expand(res, res)  # y up
    d = (fwd[:, None, None, :] + half * (uu[None, ..., None] * right[:, None, None, :]
                                           + vv[None, ..., None] * up[:, None, None, :]))
    d = d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)
    d = d.reshape(B, -1, 3)
    P = d.shape[1]
    o = cam[:, None, :].expand(B, P, 3)
    img_of = torch.arange(B)[:, None].expand(B, P).reshape(-1)
    d = d.reshape(-1, 3)
    o = o.reshape(-1, 3)

    cy, sy = torch.cos(yaw), torch.sin(yaw)

    def obj_sdf(p, ids):
        """Distance from world points p (M, 3) of images ids to their (rotated, scaled) object."""
        s = scale[ids]
        x, y, z = p[:, 0], p[:, 1], p[:, 2]
        c, si = cy[ids], sy[ids]
        q = torch.stack([(c * x - si * z) / s, y / s, (si * x + c * z) / s], 1)
        return shape_fn(q) * s

    def bound_hit(o_, d_, ids):
        """Entry and exit distances of rays through each image's bounding sphere (inf when missed)."""
        c = torch.tensor(BOUND_C)[None, :] * scale[ids][:, None]
        r = BOUND_R * scale[ids]
        oc = o_ - c
        b = (oc * d_).sum(1)
        disc = b * b - ((oc * oc).sum(1) - r * r)
        sq = torch.sqrt(torch.clamp(disc, min=0))
        t0 = torch.where(disc > 0, -b - sq, torch.full_like(b, math.inf))
        t1 = torch.where(disc > 0, -b + sq, torch.full_like(b, math.inf))
        return torch.clamp(t0, min=0), t1

    # floor
    t_floor = torch.where(d[:, 1] < -1e-6, -o[:, 1] / d[:, 1].clamp(max=-1e-6), torch.full((len(d),), math.inf))
    # object: sphere tracing inside the bounding sphere
    t0, t1 = bound_hit(o, d, img_of)
    act = torch.nonzero(torch.isfinite(t0)).squeeze(1)
    t_obj = torch.full((len(d),), math.inf)
    if len(act):
        ids = img_of[act]
        oa, da = o[act], d[act]
        t = t0[act].clone()
        tend = torch.minimum(t1[act], t_floor[act])
        hit = torch.zeros(len(act), dtype=torch.bool)
        live = torch.ones(len(act), dtype=torch.bool)
        for _ in range(MARCH_STEPS):
            li = torch.nonzero(live).squeeze(1)
            if len(li) == 0:
                break
            h = obj_sdf(oa[li] + da[li] * t[li, None], ids[li])
            newhit = h < HIT_EPS * t[li]
            hit[li] = newhit
            t[li] = t[li] + torch.where(newhit, torch.zeros_like(h), h * 0.9)
            live[li] = (~newhit) & (t[li] < tend[li])
        t_obj[act] = torch.where(hit, t, torch.full_like(t, math.inf))

    is_obj = torch.isfinite(t_obj)
    is_floor = (~is_obj) & torch.isfinite(t_floor)
    t_hit = torch.where(is_obj, t_obj, t_floor)
    surf = is_obj | is_floor
    pos = o + d * torch.where(surf, t_hit, torch.zeros_like(t_hit))[:, None]

    # normals: floor up; object by tetrahedral finite differences
    nrm = torch.zeros_like(pos)
    nrm[:, 1] = 1.0
    oi = torch.nonzero(is_obj).squeeze(1)
    if len(oi):
        e = 1e-3
        ks = torch.tensor([[1, -1, -1], [-1, -1, 1], [-1, 1, -1], [1, 1, 1]], dtype=f32)
        n = torch.zeros(len(oi), 3)
        for k in ks:
            n = n + k[None, :] * obj_sdf(pos[oi] + e * k[None, :], img_of[oi])[:, None]
        nrm[oi] = n / torch.linalg.vector_norm(n, dim=1, keepdim=True).clamp(min=1e-12)

    # soft shadows toward the sun (only the object casts them)
    shadow = torch.ones(len(d))
    si_ = torch.nonzero(surf).squeeze(1)
    if len(si_):
        Ls = L[img_of[si_]]
        po = pos[si_] + nrm[si_] * 4e-3
        s0, s1 = bound_hit(po, Ls, img_of[si_])
        cand = torch.nonzero(torch.isfinite(s0) & ((Ls * nrm[si_]).sum(1) > 0)).squeeze(1)
        if len(cand):
            ids = img_of[si_[cand]]
            pc, lc = po[cand], Ls[cand]
            t = torch.maximum(s0[cand], torch.full_like(s0[cand], 0.01))
            tend = s1[cand]
            res_ = torch.ones(len(cand))
            live = t < tend
            for _ in range(SHADOW_STEPS):
                li = torch.nonzero(live).squeeze(1)
                if len(li) == 0:
                    break
                h = obj_sdf(pc[li] + lc[li] * t[li, None], ids[li])
                res_[li] = torch.minimum(res_[li], torch.clamp(10.0 * h / t[li], min=0.0))
                t[li] = t[li] + torch.clamp(h, 0.01, 0.25)
                live[li] = (res_[li] > 0.005) & (t[li] < tend[li])
            sm = res_.clamp(0, 1)
            shadow[si_[cand]] = sm * sm * (3 - 2 * sm)

    ndl = torch.clamp((nrm * L[img_of]).sum(1), min=0.0)
    diffuse = ndl * shadow

    obj_rgb = T(_hsv_to_rgb(props["obj_hue"], props["obj_sat"], props["obj_val"]))
    floor_rgb = T(_hsv_to_rgb(props["bg_hue"], np.full(B, 0.35), np.full(B, 0.8)))
    sky_rgb = T(_hsv_to_rgb(props["bg_hue"], np.full(B, 0.22), np.full(B, 0.95)))

    ambient_obj = 0.22 + 0.08 * nrm[:, 1].clamp(min=0)
    col_obj = obj_rgb[img_of] * (ambient_obj + 0.85 * diffuse)[:, None]
    col_floor = floor_rgb[img_of] * (0.3 + 0.75 * diffuse)[:, None]
    fog = torch.exp(-torch.clamp(t_hit - CAM_DIST, min=0) * 0.06)[:, None]
    sky = sky_rgb[img_of] * (0.85 + 0.15 * torch.clamp(d[:, 1], 0, 1))[:, None]
    col_floor = col_floor * fog + sky * (1 - fog)
    col = torch.where(is_obj[:, None], col_obj, torch.where(is_floor[:, None], col_floor, sky))
    col = col.clamp(0, 1).reshape(B, res, res, 3)
    if ss > 1:
        col = col.reshape(B, size, ss, size, ss, 3).mean((2, 4))
    return col.numpy()


def render(props: dict[str, np.ndarray], size: int = DEFAULT_SIZE, *, supersample: int = 2,
           batch: int = 64, threads: int = 1, progress: bool = False) -> np.ndarray:
    """Render the scenes described by ``props`` (as from :func:`draw_properties`) -> uint8 (N, size, size, 3).

    Ray marching of the object's SDF (sphere tracing inside a bounding sphere), an analytic floor,
    Lambertian shading with a directional sun, soft cast shadows (the object shadows itself and the
    floor), ``supersample`` x ``supersample`` rays per pixel averaged. Vectorised over the rays of a
    batch of scenes of the same shape; CPU torch with ``threads`` threads (default 1: on a busy
    machine two spinning torch threads were measured 12x slower than one).
    """
    import torch

    if not 16 <= size <= 512:
        raise EmbedscopeError(f"shapes: image size must be between 16 and 512 pixels, got {size}")
    n = len(props["shape"])
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    bar = None
    if progress:
        from embedscope.progress import progress_bar

        bar = progress_bar(total=n, desc="render shapes", unit="img")
    try:
        with torch_threads(max(1, int(threads))), torch.no_grad():
            for s, (_, fn) in enumerate(SHAPES):
                idx = np.flatnonzero(props["shape"] == s)
                for b0 in range(0, len(idx), batch):
                    sel = idx[b0:b0 + batch]
                    img = _render_group(fn, {k: v[sel] for k, v in props.items()}, size, supersample)
                    out[sel] = np.clip(np.round(img * 255), 0, 255).astype(np.uint8)
                    if bar is not None:
                        bar.update(len(sel))
    finally:
        if bar is not None:
            bar.close()
    return out


# ----------------------------------------------------------------------------- generation + cache


def generation_key(n: int, size: int, seed: int) -> str:
    """The cache key of a generated set: its parameters and the renderer version."""
    blob = json.dumps({"n": n, "size": size, "seed": seed, "render": RENDER_VERSION}, sort_keys=True)
    return f"n{n}-s{size}-seed{seed}-" + hashlib.sha1(blob.encode()).hexdigest()[:8]


def default_cache_dir() -> Path:
    """``$EMBEDSCOPE_CACHE/shapes``, else ``$XDG_CACHE_HOME/embedscope/shapes``, else ``~/.cache/embedscope/shapes``."""
    from embedscope.fileio import cache_root

    return cache_root() / "shapes"


def _physical_memory() -> int | None:
    """The machine's memory in bytes (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _check_memory(n: int, size: int) -> None:
    """Refuse a set whose images (held in memory as one uint8 array, n x size x size x 3) exceed the
    machine's memory, before any work: ``--n-images 100000000`` was a MemoryError naming a 71.5 TiB array,
    and a set just above the memory was rendered for hours until the system killed the process."""
    if n < 1:
        return  # (draw_properties says so)
    need = n * size * size * 3
    total = _physical_memory()
    if total is not None and need > total:
        raise EmbedscopeError(f"shapes: {n} images of {size} x {size} pixels need {need / 2**30:.1f} GiB of memory "
                              f"(they are rendered in memory), more than this machine's {total / 2**30:.1f} GiB: "
                              "make fewer or smaller images")


def generate(n: int = DEFAULT_N, size: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED, *, progress: bool = False
             ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Draw the properties of ``n`` scenes from ``seed`` and render them: (uint8 images, properties)."""
    _check_memory(n, size)
    props = draw_properties(n, seed)
    return render(props, size, progress=progress), props


def _rows(props: dict[str, np.ndarray], paths) -> list[dict]:
    rows = []
    for i, p in enumerate(paths):
        r = {"path": p, "shape": SHAPE_NAMES[int(props["shape"][i])], "label": int(props["shape"][i])}
        for k in PROPERTY_VALUES:
            v = props[k][i]
            r[k] = v.item() if hasattr(v, "item") else v
        rows.append(r)
    return rows


def write_folder(out: str | os.PathLike, n: int = DEFAULT_N, size: int = DEFAULT_SIZE, seed: int = DEFAULT_SEED, *,
                 force: bool = False, progress: bool = False) -> Path:
    """Generate a set and write ``images/NNNNNN.png`` and ``properties.csv`` (+ ``shapes.json``) into ``out``.

    The folder is a valid ``--root`` of ``--dataset shapes``. Without ``force`` an existing
    ``properties.csv`` in ``out`` is an error.
    """
    from embedscope.fileio import (
        check_writable,
        folder_lock,
        output_group,
        track_new_folders,
        write_text,
    )

    out = Path(out)
    for d in (out, out / "images"):  # (was "FileExistsError: [Errno 17] File exists", once the set was rendered)
        if d.is_symlink() and not d.exists():
            raise EmbedscopeError(f"{d}: a symbolic link to {os.readlink(d)}, which does not exist: create the "
                                  "folder it names, or give another folder")
    if out.exists() and not out.is_dir():
        raise EmbedscopeError(f"{out}: exists and is not a folder")
    if (out / "properties.csv").exists() and not force:
        raise EmbedscopeError(f"{out / 'properties.csv'} already exists (use --force to replace the set)")
    if (out / "images").exists() and not (out / "images").is_dir():
        raise EmbedscopeError(f"{out / 'images'}: exists and is not a folder")
    if not force and (out / "images").is_dir() and any((out / "images").iterdir()):
        # no shapes set (no properties.csv) but files in images/: another data set's, or the user's own
        # images/000000.png ... would be replaced (or mixed with the set's) without a word
        raise EmbedscopeError(f"{out / 'images'} holds files already and {out} has no properties.csv (no shapes set): "
                              "choose a new or empty folder, or --force to write the set into it")
    # before rendering: a file as a parent of the folder, or a folder that cannot be written; a folder in
    # the place of shapes.json (written last but one) was refused only once every image was rendered and written
    check_writable(out / "properties.csv", force=True)
    check_writable(out / "shapes.json", force=True)
    images, props = generate(n, size, seed, progress=progress)
    with output_group([out]), contextlib.ExitStack() as held:  # all or nothing (within the command line's own group)
        new = track_new_folders(out / "images")
        out.mkdir(parents=True, exist_ok=True)
        # one writer of a set at a time: two make-shapes into one folder both passed the checks above (refused:
        # the folders this one made are the other writer's, not removed by this one's failure: folder_lock)
        held.enter_context(folder_lock(out, f"the shapes set {out}", made=new))
        if (out / "properties.csv").exists() and not force:  # (written by another make-shapes meanwhile)
            raise EmbedscopeError(f"{out / 'properties.csv'} already exists (use --force to replace the set)")
        if force and (out / "properties.csv").exists():
            # the earlier set's table is marked before its first image is replaced (and put back if
            # this call fails): a process killed midway leaves no table labelling another set's images
            write_text(out / "properties.csv", INCOMPLETE, force=True)
        _write_set(out, n, size, seed, images, props, progress)
    return out


def _write_set(out: Path, n: int, size: int, seed: int, images: np.ndarray, props: dict[str, np.ndarray],
               progress: bool) -> None:
    """The files of :func:`write_folder`: the images, ``shapes.json``, then ``properties.csv``."""
    from PIL import Image

    from embedscope.fileio import atomic_output, write_text
    from embedscope.progress import progress_bar

    (out / "images").mkdir(parents=True, exist_ok=True)
    paths = [f"images/{i:06d}.png" for i in range(n)]
    for i, p in enumerate(progress_bar(paths, desc="write images", unit="img", enabled=progress)):
        with atomic_output(out / p, force=True) as tmp:
            Image.fromarray(images[i]).save(tmp, format="PNG")
    rows = _rows(props, paths)
    cols = list(rows[0])
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    meta = {"n": n, "size": size, "seed": seed, "render_version": RENDER_VERSION, "shapes": list(SHAPE_NAMES),
            "train_shapes": TRAIN_SHAPES, "property_values": {k: list(v) for k, v in PROPERTY_VALUES.items()}}
    write_text(out / "shapes.json", json.dumps(meta, indent=1) + "\n", force=True)
    write_text(out / "properties.csv", buf.getvalue(), force=True)
    # a --force that wrote fewer images than the set it replaced: that set's extra images (named as
    # make-shapes names them; nothing else) go, so that the folder holds one set
    for f in (out / "images").glob("[0-9]*.png"):
        if len(f.stem) == 6 and f.stem.isdigit() and int(f.stem) >= n:
            f.unlink(missing_ok=True)


def _cached(n: int, size: int, seed: int, cache: Path, progress: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Images and properties from the cache folder, generating and storing them on first use."""
    from embedscope.fileio import atomic_output

    folder = cache / generation_key(n, size, seed)
    f = folder / "shapes.npz"
    if f.exists():
        try:
            with np.load(f, allow_pickle=False) as z:
                images = z["images"]
                props = {k: z[f"prop_{k}"] for k in PROPERTY_NAMES}
            if images.shape == (n, size, size, 3):
                return images, props
        except (OSError, KeyError, ValueError):
            pass  # a damaged cache file is regenerated
    images, props = generate(n, size, seed, progress=progress)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_output(f, force=True) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, images=images, **{f"prop_{k}": v for k, v in props.items()})
    except (OSError, EmbedscopeError):
        pass  # an unwritable cache only costs the next run the generation
    return images, props


def _check_cache_root(root: Path) -> None:
    """A ``--root`` without ``properties.csv`` caches the generated set: it must be an empty folder or
    such a cache already (only ``n…-s…-seed…-<hash>`` folders), never another folder (a mistyped ``--root``
    of a make-shapes folder, or unrelated files, must not silently become the default set)."""
    if not root.exists():
        raise EmbedscopeError(f"{NAME}: --root {root} does not exist; give a make-shapes folder, or create an empty "
                              f"folder to cache the generated set in (without --root it is cached in "
                              f"{default_cache_dir()})")
    if not root.is_dir():
        raise EmbedscopeError(f"{NAME}: --root {root} is not a folder")
    try:
        names = [p.name for p in root.iterdir()]
    except OSError as e:
        raise EmbedscopeError(f"{NAME}: --root {root} cannot be read ({e.strerror or e})") from None
    foreign = [x for x in names if not (re.fullmatch(r"n\d+-s\d+-seed-?\d+-[0-9a-f]{8}", x) or x.startswith("."))]
    if foreign:
        raise EmbedscopeError(f"{NAME}: --root {root} holds no properties.csv (not a make-shapes folder) and is not "
                              "a cache of generated sets; give a make-shapes folder, or a new or empty folder to "
                              "cache the generated set in")


def _read_folder(root: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """paths and properties of a folder written by :func:`write_folder`."""
    f = root / "properties.csv"
    try:
        with open(f, newline="", encoding="utf-8") as fh:
            if fh.readline() == INCOMPLETE:
                raise EmbedscopeError(f"{NAME}: {f}: writing this set was interrupted (make-shapes --force "
                                      "stopped midway); write it again with make-shapes --force")
            fh.seek(0)
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise EmbedscopeError(f"{NAME}: cannot read {f} ({e.__class__.__name__})") from None
    need = ["path", "shape"] + list(PROPERTY_VALUES)
    if not rows or any(c not in rows[0] for c in need):
        missing = [c for c in need if not rows or c not in rows[0]]
        raise EmbedscopeError(f"{NAME}: {f} lacks the column(s) {', '.join(missing) or '(no rows)'}")
    # (line numbers: the header is line 1; DictReader fills the cells a short row lacks with None and puts
    # a long row's extra cells under the key None)
    for i, r in enumerate(rows):
        if None in r or any(v is None for v in r.values()):
            cells = sum(v is not None for k, v in r.items() if k is not None) + len(r.get(None) or [])
            raise EmbedscopeError(f"{NAME}: {f}:{i + 2}: malformed line ({cells} cells where the header has "
                                  f"{len([k for k in r if k is not None])})")
    index = {s: i for i, s in enumerate(SHAPE_NAMES)}
    props: dict[str, np.ndarray] = {}
    bad = [(i, r["shape"]) for i, r in enumerate(rows) if r["shape"] not in index]
    if bad:
        raise EmbedscopeError(f"{NAME}: {f}:{bad[0][0] + 2}: unknown shape {quoted(bad[0][1])}")
    props["shape"] = np.array([index[r["shape"]] for r in rows], dtype=np.int64)
    for k, vals in PROPERTY_VALUES.items():
        typ = int if isinstance(vals[0], int) else float
        out = []
        for i, r in enumerate(rows):
            try:
                out.append(typ(r[k]))
            except ValueError:
                raise EmbedscopeError(f"{NAME}: {f}:{i + 2}: column '{k}' holds a non-numeric value "
                                      f"{quoted(r[k])}") from None
        props[k] = np.array(out)
    return [r["path"] for r in rows], props


def _recorded_size(base: Path) -> int | None:
    """The ``size`` a make-shapes folder's ``shapes.json`` records; None when that file is missing,
    unreadable or holds no valid size (an int in 16-512, the range of ``make-shapes --size``)."""
    try:
        size = json.loads((base / "shapes.json").read_text(encoding="utf-8")).get("size")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 16 <= size <= 512:
        return None
    return size


def _first_image(base: Path) -> tuple[str, tuple[int, int]] | None:
    """The first image ``properties.csv`` lists (its path there) and its (width, height), read from its header
    (PIL opens lazily: no pixel is decoded) once per image file (:data:`_HEADER_SIZES`); None when the table
    lists none or the file is missing or no image (the loader names those itself)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with open(base / "properties.csv", newline="", encoding="utf-8") as fh:
            if fh.readline() == INCOMPLETE:
                return None
            fh.seek(0)
            row = next(csv.DictReader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not row or not row.get("path"):
        return None
    f = base / row["path"]
    # the header is read once per folder and image: train and embed ask twice (the default --image-size,
    # then the loader's check against shapes.json); a changed image (another inode, size or time) is read again
    try:
        stat = f.stat()
        key = (str(f.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    except (OSError, ValueError, RuntimeError):
        return None
    size = _HEADER_SIZES.get(key)
    if size is None:
        try:
            size = _image_size(f)
        except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError):
            return None
        _HEADER_SIZES[key] = size
    return row["path"], size


#: (resolved path, inode, size, mtime_ns, ctime_ns) of a make-shapes folder's first image -> its (width, height)
_HEADER_SIZES: dict[tuple, tuple[int, int]] = {}


def _image_size(f: Path) -> tuple[int, int]:
    """(width, height) of the image ``f`` from its header (PIL opens lazily: no pixel is decoded)."""
    from PIL import Image

    with Image.open(f) as im:
        return im.size


def folder_size(root) -> tuple[int | None, str]:
    """The image side (px) of a make-shapes folder (one holding ``properties.csv``) and where it was
    read: ``(size, "shapes.json")`` as its ``shapes.json`` records it; without a valid ``shapes.json``
    ``(side, path)`` of the first image ``properties.csv`` lists (its header only; a side in 16-512);
    ``(None, "")`` when neither tells. The first image is checked against ``shapes.json`` (make-shapes
    renders every image square at ``--size``): an image of another size, or one that is not square, is
    an error naming both (images copied in from another set), not a size silently taken from one of them."""
    base = Path(root)
    size = _recorded_size(base)
    first = _first_image(base)
    if first is None:
        return (size, "shapes.json") if size is not None else (None, "")
    path, (w, h) = first
    f = base / path
    if w != h:
        raise EmbedscopeError(f"{NAME}: {f} is {w}x{h} px, not square: a make-shapes folder holds square "
                              f"images of one size (make it again with embedscope make-shapes -o {base} --force)")
    if size is not None and w != size:
        raise EmbedscopeError(f"{NAME}: {base / 'shapes.json'} records images of {size} px but {f} is {w}x{h} px: "
                              f"the images are not the set shapes.json describes (make it again with "
                              f"embedscope make-shapes -o {base} --size N --force)")
    if size is not None:
        return size, "shapes.json"
    return (w, path) if 16 <= w <= 512 else (None, "")  # (make-shapes' range, as of a recorded size)


def rendered_size(root=None) -> int | None:
    """The image side (px) of the ``shapes`` set that ``--root`` names, without decoding its images.

    A make-shapes folder (one holding ``properties.csv``): the ``size`` its ``shapes.json`` records;
    without a valid ``shapes.json``, the side of the first image (:func:`folder_size`; a warning says
    so); None when neither tells. No ``root``, or a folder that caches the generated default set:
    :data:`DEFAULT_SIZE`. ``train`` and ``embed`` take it as the default ``--image-size`` of a shapes
    run, so that a set made with ``make-shapes --size 32`` is trained and embedded at 32 px rather
    than resampled to 64 (docs/training.md, ``--image-size``; docs/datasets.md).
    """
    if root is None:
        return DEFAULT_SIZE
    if os.fspath(root) == "":
        return None  # (not the working folder's set: the loader refuses an empty --root)
    base = Path(root)
    if not (base / "properties.csv").exists():
        return DEFAULT_SIZE if base.is_dir() else None  # (a cache of the default set; a missing root fails later)
    size, source = folder_size(base)
    if size is not None and source != "shapes.json":
        import warnings

        from embedscope.errors import EmbedscopeWarning

        warnings.warn(EmbedscopeWarning(
            f"{NAME}: {base} has no valid shapes.json (the settings make-shapes records): its image size, "
            f"{size} px, is read from its first image ({source})"), stacklevel=2)
    return size


def load_shapes(root=None, train_classes: int | None = None, *, n: int | None = None, size: int | None = None,
                seed: int | None = None, progress: bool = True) -> ImageDataset:
    """The ``shapes`` data set as an :class:`ImageDataset` whose ``properties`` are the scene properties.

    ``root`` holding a ``properties.csv`` (a folder written by ``embedscope make-shapes``): that set,
    images read from its PNGs. ``root`` an empty folder (or None): the default set (``n`` = 4,800 images of
    ``size`` = 64 px from ``seed`` 0) is generated once and cached there (``root``) or in
    :func:`default_cache_dir`; later loads read the cache (a few seconds).

    Classes are the 24 shapes; the first 12 (``train_classes``) form the training split, the other
    12 the unseen test split (zero-shot, as Roth et al. 2020 §4.1). ``properties`` hold every
    property of the table in the module docstring (``shape`` included, as Kobs' "car model"), so
    ``embed`` stores them as ``/properties/<name>`` and ``embedscope properties`` can measure them
    (docs/methods.md §9).
    """
    # "" (--root "$DATA" of an unset variable) is the working folder as a path: it was read as the set (a
    # make-shapes folder there) or filled with the generated one, and recorded as no folder at all
    check_root_given(root, NAME)
    n = DEFAULT_N if n is None else int(n)
    size = DEFAULT_SIZE if size is None else int(size)
    seed = DEFAULT_SEED if seed is None else int(seed)
    n_cls = len(SHAPES)
    tc = TRAIN_SHAPES if train_classes is None else train_classes
    images = None
    if root is not None and (Path(root) / "properties.csv").exists():
        base = Path(root)
        paths, props = _read_folder(base)
        from embedscope.data.base import check_images_exist

        check_images_exist(base, paths, NAME)
        info = {"source": f"shapes folder {base}"}
        meta = base / "shapes.json"
        if meta.exists():
            try:
                info["generation"] = json.loads(meta.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        if not isinstance(info.get("generation"), dict):
            info.pop("generation", None)
        rendered, source = folder_size(base)  # the first image checked against shapes.json (one header)
        if rendered is not None and source != "shapes.json":  # no valid shapes.json: the first image's side
            info["generation"] = {**info.get("generation", {}), "size": rendered, "size_from": source}
        root_s = str(base)
    else:
        if root is not None:
            _check_cache_root(Path(root))
        cache = Path(root) if root is not None else default_cache_dir()
        images, props = _cached(n, size, seed, cache, progress)
        paths = [f"shapes/{generation_key(n, size, seed)}/{i:06d}" for i in range(n)]
        info = {"source": "generated", "generation": {"n": n, "size": size, "seed": seed,
                                                      "render_version": RENDER_VERSION}}
        root_s = None
    labels = props["shape"].astype(np.int64)
    return ImageDataset(
        name=NAME,
        root=root_s,
        paths=np.asarray(paths, dtype=object),
        labels=labels,
        class_names=np.asarray(SHAPE_NAMES, dtype=object),
        split=class_split(labels, n_cls, tc, NAME),
        kind="image",
        images=images,
        properties={k: np.asarray(v) for k, v in props.items()},
        info=info,
    )
