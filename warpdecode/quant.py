"""FP8 expert weights in the two block-scaled formats production checkpoints and GPUs use.

    format     elements   one scale per                       scale dtype          dequantized weight
    block128   e4m3       128 rows × 128 columns (a block)    float32              q · s[r // 128, c // 128]
    mxfp8      e4m3       1 row × 32 columns (OCP MX)         e8m0 (uint8 bits)    q · 2^(bits[r, c // 32] − 127)

``block128``: DeepSeek-V3 / Qwen3 FP8 ``weight`` and ``weight_scale_inv``; w13's gate and up blocks
restart at row I: scales (E, 2·⌈I/128⌉, ⌈H/128⌉) (vLLM's ``w13_weight_scale_inv``), w2's (E, ⌈H/128⌉,
⌈I/128⌉). ``mxfp8`` (Blackwell): (E, 2I, ⌈H/32⌉) and (E, H, ⌈I/32⌉). Bytes per weight: 1 + 4/16384
(block128), 1 + 1/32 (mxfp8), against 2 in bf16.

:func:`quantize_experts` makes either format, :func:`experts_from_checkpoint` wraps tensors uncopied;
both validate once. ``warpdecode.moe`` takes them as ``w13``/``w2`` with every method;
:meth:`FP8Weights.dequantize` is exact in float64, as the reference reads it.
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value
E8M0 = getattr(torch, "float8_e8m0fnu", None)  # torch's e8m0 dtype, where it has one
FORMATS = ("block128", "mxfp8")
COMPUTE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class FP8Weights:
    """One stacked expert weight (E, N, C), C the reduction axis: ``weight`` float8_e4m3fn, contiguous; ``scale``
    the format's (module doc), any strides; ``dtype`` the compute dtype it stands for; ``gate_up``: ``w13``'s
    halves blocked apart. No copies; ValueError or TypeError naming ``name`` on anything the kernels cannot read."""

    FORMAT: str = ""
    GROUP_N: int = 1  # rows per scale
    GROUP_K: int = 1  # reduction columns per scale
    SCALE_DTYPE, SCALE_WORDS = torch.float32, ""  # the scales' dtype, and how the message names it

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, *, dtype=torch.bfloat16, gate_up: bool = False,
                 name: str = "weight"):
        self.weight, self.scale, self.dtype, self.gate_up, self.name = weight, scale, dtype, bool(gate_up), name
        self._check_structure()
        self._check_values()

    @classmethod
    def wrap(cls, weight: torch.Tensor, scale: torch.Tensor, *, dtype, gate_up: bool, name: str) -> FP8Weights:
        """The object around tensors already validated: no check, no read of the scales (no sync)."""
        self = cls.__new__(cls)
        self.weight, self.scale, self.dtype, self.gate_up, self.name = weight, scale, dtype, bool(gate_up), name
        return self

    # -- what a tensor argument of warpdecode.moe would answer --------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    @property
    def device(self) -> torch.device:
        return self.weight.device

    def dim(self) -> int:
        return self.weight.dim()

    def element_size(self) -> int:
        return 1

    @property
    def nbytes(self) -> int:
        """Bytes of the weight and its scales."""
        return self.weight.numel() + self.scale.numel() * self.scale.element_size()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name}: {tuple(self.shape)} e4m3, scales {tuple(self.scale.shape)} "
                f"{self.scale.dtype}, dtype={self.dtype})")

    # -- the scales as the kernels index them ---------------------------------------------------------
    @classmethod
    def scale_shape_for(cls, shape, gate_up: bool = False) -> tuple[int, int, int]:
        """The scale tensor's shape a weight of ``shape`` (E, N, C) needs in this format."""
        E, N, C = shape
        parts = 2 if gate_up else 1
        return (E, parts * _cdiv(N // parts, cls.GROUP_N), _cdiv(C, cls.GROUP_K))

    @property
    def up_scale_row(self) -> int:
        """The scale row of w13's first up row (row I): the gate's row blocks come first."""
        return _cdiv(self.weight.shape[1] // 2, self.GROUP_N) if self.gate_up else 0

    def scale_factors(self, e: int | None = None) -> torch.Tensor:
        """The scales as float64 factors, in the scale tensor's shape (expert ``e``'s only, if given)."""
        return self._factors(self.scale if e is None else self.scale[e])

    def _factors(self, scale: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- dequantization -----------------------------------------------------------------------------
    def expert(self, e: int, dtype=None) -> torch.Tensor:
        """Expert e's (N, C) weight q · s in ``dtype`` (default :attr:`dtype`); exact in float64."""
        E, N, C = self.weight.shape
        s = self.scale_factors(e)  # (scale rows, column groups)
        parts = 2 if self.gate_up else 1
        rows = torch.arange(N, device=s.device)
        part, r = rows // (N // parts), rows % (N // parts)
        srow = part * _cdiv(N // parts, self.GROUP_N) + r // self.GROUP_N
        scol = torch.arange(C, device=s.device) // self.GROUP_K
        w = self.weight[e].double() * s[srow][:, scol]
        return w.to(dtype or self.dtype)

    def dequantize(self, dtype=None) -> torch.Tensor:
        """The (E, N, C) weights in ``dtype`` (default :attr:`dtype`), expert by expert in float64."""
        out = torch.empty(self.weight.shape, dtype=dtype or self.dtype, device=self.device)
        for e in range(self.weight.shape[0]):
            out[e] = self.expert(e, out.dtype)
        return out

    # -- validation ---------------------------------------------------------------------------------
    def _check_structure(self):
        n, w, s = self.name, self.weight, self.scale
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"{n}: the FP8 weight must be a torch.Tensor, got {type(w).__name__}")
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{n}: the scale must be a torch.Tensor, got {type(s).__name__}")
        if w.dtype != FP8:
            raise TypeError(f"{n}: the weight must be torch.float8_e4m3fn, got {w.dtype}")
        if w.dim() != 3:
            raise ValueError(f"{n}: the weight must be 3-D (E, N, C), got shape {tuple(w.shape)}")
        if self.gate_up and w.shape[1] % 2:
            raise ValueError(f"{n}: a gate/up weight must have an even number of rows (2I), got {tuple(w.shape)}")
        if not w.is_contiguous():
            raise ValueError(f"{n}: the weight must be contiguous (the kernels stream its rows)")
        if self.dtype not in COMPUTE_DTYPES:
            raise TypeError(f"{n}: dtype must be bfloat16, float16 or float32, got {self.dtype}")
        if s.device != w.device:
            raise ValueError(f"{n}: the scale is on {s.device}, the weight on {w.device}")
        if tuple(s.shape) != (want := self.scale_shape_for(w.shape, self.gate_up)):
            raise ValueError(f"{n}: {self.FORMAT} scales of a weight {tuple(w.shape)} must have shape "
                             f"{want}{self._shape_note()}, got {tuple(s.shape)}")
        if s.dtype != self.SCALE_DTYPE:
            raise TypeError(f"{n}: {self.FORMAT} scales must be {self.SCALE_WORDS}, got {s.dtype}")

    def _shape_note(self) -> str:
        return ""

    def _check_values(self):
        """The scales' values (read once, not on ``meta``): ValueError naming the first bad one."""
        s, mx = self.scale, self.FORMAT == "mxfp8"
        bad = ((s == 255) | (s == 0)) if mx else (~torch.isfinite(s) | (s <= 0))
        if s.device.type != "meta" and s.numel() and bool(bad.any()):
            idx = tuple(int(v) for v in bad.nonzero()[0])
            valid = "finite e8m0 in [2^-126, 2^127]" if mx else "finite and positive"
            got = (("NaN (255)" if int(s[idx]) == 255 else "2^-127 (0), below float32's normal range") if mx
                   else float(s[idx]))
            raise ValueError(f"{self.name}: {self.FORMAT} scales must be {valid}, got {got} at {idx}")


class BlockFP8Weights(FP8Weights):
    """e4m3 weights with one float32 scale per 128 × 128 block (DeepSeek-V3, Qwen3 FP8)."""

    FORMAT, GROUP_N, GROUP_K = "block128", 128, 128
    SCALE_DTYPE, SCALE_WORDS = torch.float32, "float32 (weight_scale_inv)"

    def _shape_note(self) -> str:
        return " (gate and up blocked separately: 2·⌈I/128⌉ row blocks)" if self.gate_up else ""

    def _factors(self, scale: torch.Tensor) -> torch.Tensor:
        return scale.double()


class MXFP8Weights(FP8Weights):
    """e4m3 weights with one e8m0 (power-of-two) scale per 32 elements of the reduction axis (OCP MX)."""

    FORMAT, GROUP_N, GROUP_K = "mxfp8", 1, 32
    SCALE_DTYPE, SCALE_WORDS = torch.uint8, "e8m0 (torch.float8_e8m0fnu, or its uint8 bits)"

    def __init__(self, weight, scale, **kwargs):
        if isinstance(scale, torch.Tensor) and E8M0 is not None and scale.dtype == E8M0:
            scale = scale.view(torch.uint8)  # the kernels and the checks read e8m0 as its uint8 bits
        super().__init__(weight, scale, **kwargs)

    def _factors(self, scale: torch.Tensor) -> torch.Tensor:
        return torch.exp2(scale.double() - 127)


CLASSES = {"block128": BlockFP8Weights, "mxfp8": MXFP8Weights}


def _blocks(w: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """(E, N, C) → (E, ⌈N/rows⌉, rows, ⌈C/cols⌉, cols) in float32, zero-padded (zeros change no amax)."""
    E, N, C = w.shape
    nb, cb = _cdiv(N, rows), _cdiv(C, cols)
    padded = torch.zeros(E, nb * rows, cb * cols, dtype=torch.float32, device=w.device)
    padded[:, :N, :C] = w
    return padded.view(E, nb, rows, cb, cols)


def _quantize_block128(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One part: s = amax / 448 per 128 × 128 block (1 if all zero), q = e4m3(w / s)."""
    E, N, C = w.shape
    b = _blocks(w, 128, 128)
    amax = b.abs().amax(dim=(2, 4))  # (E, nb, cb)
    s = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (b / s[:, :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(E, b.shape[1] * 128, -1)[:, :N, :C].contiguous(), s


def _quantize_mxfp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """s = 2^⌈log2(amax / 448)⌉ per row per 32 columns (1 if all zero) as e8m0 bits, q = e4m3(w / s)."""
    E, N, C = w.shape
    b = _blocks(w, 1, 32).view(E, N, -1, 32)
    amax = b.abs().amax(dim=-1)  # (E, N, groups)
    mant, exp = torch.frexp(amax / FP8_MAX)  # amax / 448 = mant · 2^exp, mant in [0.5, 1)
    up = torch.where(mant == 0.5, exp - 1, exp)  # ⌈log2⌉
    up = torch.where(amax > 0, up, torch.zeros_like(up)).clamp(-126, 127)
    q = (b / torch.exp2(up.float())[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(E, N, -1)[:, :, :C].contiguous(), (up + 127).to(torch.uint8)


def _format_class(format: str) -> type[FP8Weights]:
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    return CLASSES[format]


def quantize(w: torch.Tensor, format: str = "block128", *, gate_up: bool = False, name: str = "weight") -> FP8Weights:
    """One stacked expert weight (E, N, C) in bf16/fp16/fp32 → :class:`FP8Weights` of ``format``."""
    cls = _format_class(format)
    if not isinstance(w, torch.Tensor) or w.dim() != 3 or w.dtype not in COMPUTE_DTYPES:
        raise ValueError(f"{name} must be a 3-D bfloat16, float16 or float32 tensor to quantize, got "
                         f"{getattr(w, 'dtype', type(w).__name__)} {tuple(getattr(w, 'shape', ()))}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{name} holds non-finite values: no FP8 scale represents them")
    if gate_up and w.shape[1] % 2:
        raise ValueError(f"{name} must have an even number of rows (2I), got {tuple(w.shape)}")
    fn = _quantize_block128 if format == "block128" else _quantize_mxfp8
    q = torch.empty(w.shape, dtype=FP8, device=w.device)
    s = torch.empty(cls.scale_shape_for(w.shape, gate_up), dtype=cls.SCALE_DTYPE, device=w.device)
    for e in range(w.shape[0]):  # one expert at a time: the FP32 working copy stays one expert's size
        # gate and up rows quantized as the separate projections they are in a checkpoint
        qs, ss = zip(*(fn(part) for part in w[e:e + 1].chunk(2 if gate_up else 1, dim=1)), strict=True)
        q[e], s[e] = torch.cat(qs, dim=1)[0], torch.cat(ss, dim=1)[0]
    return cls(q, s, dtype=w.dtype, gate_up=gate_up, name=name)


def quantize_experts(w13: torch.Tensor, w2: torch.Tensor, format: str = "block128") -> tuple[FP8Weights, FP8Weights]:
    """(w13 (E, 2I, H), w2 (E, H, I)) → the pair in ``format`` ("block128" or "mxfp8"), which
    ``warpdecode.moe`` takes in their place; ``.dequantize()`` gives them back in their dtype."""
    return quantize(w13, format, gate_up=True, name="w13"), quantize(w2, format, name="w2")


def experts_from_checkpoint(w13, w13_scale, w2, w2_scale, *, format: str = "block128",
                            dtype=torch.bfloat16) -> tuple[FP8Weights, FP8Weights]:
    """A checkpoint's stacked FP8 tensors w13 (E, 2I, H, gate then up), w2 (E, H, I) and scales (w13_scale,
    w2_scale: block128 ``weight_scale_inv``, float32; mxfp8 ``weight_scale``, e8m0 or its uint8 bits) in
    ``format``, uncopied; ``dtype``: the activations'."""
    cls = _format_class(format)
    return cls(w13, w13_scale, dtype=dtype, gate_up=True, name="w13"), cls(w2, w2_scale, dtype=dtype, name="w2")


def is_fp8(w) -> bool:
    return isinstance(w, FP8Weights)


def dense(w, dtype=None):
    """``w`` as a plain tensor: FP8 weights dequantized (to ``dtype``, default their own), others as they are."""
    return w.dequantize(dtype) if is_fp8(w) else w
