"""The "sequential" layer language shared with the TypeScript tests, built as torch modules.

A spec is a list of layers.  Each layer is ``[kind, attrs]`` or ``[kind, attrs, children]``.
Input channels / features are inferred from the running shape, so the spec only states what
changes.  The exact rules (defaults, module names, what each kind maps to) are written down in
tools/oracle/README.md ("Layer language"); keep the two in step.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple, Union

import torch
from torch import nn
from functools import partial

from torchvision.models.efficientnet import MBConv, MBConvConfig
from torchvision.models.resnet import BasicBlock, Bottleneck
from torchvision.models.squeezenet import Fire
from torchvision.ops.misc import SqueezeExcitation
from torchvision.ops.stochastic_depth import StochasticDepth

Shape = Tuple[int, ...]

ACTIVATIONS_INPLACE = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "hardswish": nn.Hardswish,
    "hardsigmoid": nn.Hardsigmoid,
    "silu": nn.SiLU,
}
ACTIVATIONS_PLAIN = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh}

KNOWN_ATTRS = {
    "conv2d": {"out", "kernel", "stride", "padding", "dilation", "groups", "bias"},
    "bn": set(),
    "linear": {"out", "bias"},
    "relu": {"inplace"},
    "relu6": {"inplace"},
    "hardswish": {"inplace"},
    "hardsigmoid": {"inplace"},
    "silu": {"inplace"},
    "sigmoid": set(),
    "tanh": set(),
    "gelu": {"approximate"},
    "dropout": {"p", "inplace"},
    "flatten": set(),
    "identity": set(),
    "avgpool2d": {"kernel", "stride", "padding"},
    "maxpool2d": {"kernel", "stride", "padding", "ceilMode"},
    "adaptiveavgpool2d": {"output"},
    "adaptivemaxpool2d": {"output"},
    "groupnorm": {"groups"},
    "stochasticdepth": {"p", "mode"},
    "residual": {"inplace"},
    "se": {"squeeze", "activation"},
    # torchvision's own blocks (torchvision 0.14), built by their classes:
    "basicblock": {"out", "stride"},  # resnet.BasicBlock with _make_layer's downsample
    "bottleneck": {"planes", "stride", "groups", "baseWidth"},  # resnet.Bottleneck (expansion 4)
    "fire": {"squeeze", "expand1x1", "expand3x3"},  # squeezenet.Fire
    "mbconv": {"expandRatio", "kernel", "stride", "out", "sdProb"},  # efficientnet.MBConv, BatchNorm2d
    "mha": {"heads", "dropout", "batchFirst", "needWeights"},  # SelfAttention(nn.MultiheadAttention)
    "conv1d": {"out", "kernel", "stride", "padding", "dilation", "groups", "bias"},
    "upsample": {"mode", "size", "scaleFactor", "alignCorners"},
    "layernorm2d": set(),  # torchvision.models.convnext.LayerNorm2d(C)
    "convtranspose2d": {"out", "kernel", "stride", "padding", "outputPadding", "bias"},
    "clstoken": set(),  # ClassToken: cat([class_token.expand(N, -1, -1), x], dim=1), class_token [1, 1, D]
    "posembed": set(),  # PosEmbedding: x + pos_embedding, pos_embedding [1, S, D]
    "branch": {"merge"},
}


class SpecError(ValueError):
    """A malformed layer spec; ``path`` says where (indices into the layer lists)."""

    def __init__(self, path: Sequence[Union[int, str]], message: str):
        super().__init__(f"{list(path)}: {message}")
        self.path = list(path)


class Residual(nn.Module):
    """``x + body(x)``; with ``inplace`` the sum is written into body's output (``out += x``)."""

    def __init__(self, body: nn.Sequential, inplace: bool = False):
        super().__init__()
        self.body = body
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        if self.inplace:
            out += x
            return out
        return x + out

    def extra_repr(self) -> str:
        return f"inplace={self.inplace}"


class SelfAttention(nn.Module):
    """``self.attn(x, x, x, need_weights=...)[0]``: nn.MultiheadAttention as self-attention (E = the last dim)."""

    def __init__(self, embed_dim: int, heads: int, dropout: float, batch_first: bool, need_weights: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, heads, dropout=dropout, batch_first=batch_first)
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


class ClassToken(nn.Module):
    """ViT's class token: ``torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)``."""

    def __init__(self, dim: int):
        super().__init__()
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)


class PosEmbedding(nn.Module):
    """ViT's position embedding: ``x + self.pos_embedding`` ([1, S, D])."""

    def __init__(self, seq: int, dim: int):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, dim).normal_(std=0.02))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos_embedding


class Branch(nn.Module):
    """Runs every path on the same input and merges: add (sum, left to right), mul, concat (dim 1)."""

    def __init__(self, paths: List[nn.Sequential], merge: str):
        super().__init__()
        self.paths = nn.ModuleList(paths)
        self.merge = merge

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [p(x) for p in self.paths]
        if self.merge == "concat":
            return torch.cat(outs, dim=1)
        acc = outs[0]
        for o in outs[1:]:
            acc = acc + o if self.merge == "add" else acc * o
        return acc

    def extra_repr(self) -> str:
        return f"merge={self.merge}"


def _pair(v: Any, path, name) -> Union[int, Tuple[int, int]]:
    if isinstance(v, bool):
        raise SpecError(path, f"{name}: expected an int or [h, w], received {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return (v[0], v[1])
    raise SpecError(path, f"{name}: expected an int or [h, w], received {v!r}")


def _probe(module: nn.Module, shape: Shape) -> Shape:
    """Output shape of ``module`` for an input of ``shape`` (computed on a zero tensor, eval, no grad)."""
    was = module.training
    module.eval()
    with torch.no_grad():
        out = module(torch.zeros(shape))
    module.train(was)
    return tuple(out.shape)


def build_layer(layer: Any, shape: Shape, path: List[Union[int, str]]) -> Tuple[nn.Module, Shape]:
    if not isinstance(layer, (list, tuple)) or len(layer) not in (2, 3) or not isinstance(layer[0], str):
        raise SpecError(path, f"expected [kind, attrs] or [kind, attrs, children], received {layer!r}")
    kind, attrs = layer[0], layer[1]
    children = layer[2] if len(layer) == 3 else None
    if not isinstance(attrs, dict):
        raise SpecError(path, f"attrs of {kind}: expected an object, received {attrs!r}")
    if kind not in KNOWN_ATTRS:
        raise SpecError(path, f"unknown layer kind {kind!r}; expected one of {sorted(KNOWN_ATTRS)}")
    unknown = set(attrs) - KNOWN_ATTRS[kind]
    if unknown:
        raise SpecError(path, f"{kind}: unknown attributes {sorted(unknown)}")
    if children is not None and kind not in ("residual", "branch"):
        raise SpecError(path, f"{kind} takes no children")

    if kind == "conv2d":
        if len(shape) != 4:
            raise SpecError(path, f"conv2d expects a 4-D input [N,C,H,W], received shape {list(shape)}")
        padding = attrs.get("padding", 0)
        if padding != "same":
            padding = _pair(padding, path, "padding")
        m = nn.Conv2d(
            shape[1],
            attrs["out"],
            _pair(attrs["kernel"], path, "kernel"),
            stride=_pair(attrs.get("stride", 1), path, "stride"),
            padding=padding,
            dilation=_pair(attrs.get("dilation", 1), path, "dilation"),
            groups=attrs.get("groups", 1),
            bias=attrs.get("bias", True),
        )
    elif kind == "bn":
        if len(shape) != 4:
            raise SpecError(path, f"bn expects a 4-D input [N,C,H,W], received shape {list(shape)}")
        m = nn.BatchNorm2d(shape[1])
    elif kind == "linear":
        m = nn.Linear(shape[-1], attrs["out"], bias=attrs.get("bias", True))
    elif kind in ACTIVATIONS_INPLACE:
        m = ACTIVATIONS_INPLACE[kind](inplace=attrs.get("inplace", False))
    elif kind in ACTIVATIONS_PLAIN:
        m = ACTIVATIONS_PLAIN[kind]()
    elif kind == "gelu":
        m = nn.GELU(approximate=attrs.get("approximate", "none"))
    elif kind == "dropout":
        m = nn.Dropout(p=attrs.get("p", 0.5), inplace=attrs.get("inplace", False))
    elif kind == "flatten":
        m = nn.Flatten()
    elif kind == "identity":
        m = nn.Identity()
    elif kind in ("avgpool2d", "maxpool2d"):
        k = _pair(attrs["kernel"], path, "kernel")
        s = _pair(attrs.get("stride", attrs["kernel"]), path, "stride")
        p = _pair(attrs.get("padding", 0), path, "padding")
        m = nn.AvgPool2d(k, s, p) if kind == "avgpool2d" else nn.MaxPool2d(k, s, p, ceil_mode=attrs.get("ceilMode", False))
    elif kind == "adaptiveavgpool2d":
        m = nn.AdaptiveAvgPool2d(_pair(attrs.get("output", 1), path, "output"))
    elif kind == "adaptivemaxpool2d":
        m = nn.AdaptiveMaxPool2d(_pair(attrs.get("output", 1), path, "output"))
    elif kind == "groupnorm":
        m = nn.GroupNorm(attrs["groups"], shape[1])
    elif kind == "stochasticdepth":
        m = StochasticDepth(attrs["p"], attrs.get("mode", "row"))
    elif kind == "se":
        activation = {"relu": nn.ReLU, "silu": partial(nn.SiLU, inplace=True)}[attrs.get("activation", "relu")]
        m = SqueezeExcitation(shape[1], attrs["squeeze"], activation=activation)
    elif kind in ("basicblock", "bottleneck"):
        block = BasicBlock if kind == "basicblock" else Bottleneck
        planes = attrs["out"] if kind == "basicblock" else attrs["planes"]
        stride = attrs.get("stride", 1)
        downsample = None
        if stride != 1 or shape[1] != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(shape[1], planes * block.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        extra = {} if kind == "basicblock" else {"groups": attrs.get("groups", 1), "base_width": attrs.get("baseWidth", 64)}
        m = block(shape[1], planes, stride, downsample, **extra)
    elif kind == "conv1d":
        m = nn.Conv1d(shape[1], attrs["out"], attrs["kernel"], stride=attrs.get("stride", 1), padding=attrs.get("padding", 0),
                      dilation=attrs.get("dilation", 1), groups=attrs.get("groups", 1), bias=attrs.get("bias", True))
    elif kind == "layernorm2d":
        from torchvision.models.convnext import LayerNorm2d

        m = LayerNorm2d(shape[1])
    elif kind == "convtranspose2d":
        m = nn.ConvTranspose2d(shape[1], attrs["out"], attrs["kernel"], stride=attrs.get("stride", 1), padding=attrs.get("padding", 0),
                               output_padding=attrs.get("outputPadding", 0), bias=attrs.get("bias", True))
    elif kind == "upsample":
        size = attrs.get("size")
        m = nn.Upsample(size=tuple(size) if isinstance(size, list) else size, scale_factor=attrs.get("scaleFactor"),
                        mode=attrs.get("mode", "nearest"), align_corners=attrs.get("alignCorners"))
    elif kind == "clstoken":
        m = ClassToken(shape[-1])
    elif kind == "posembed":
        m = PosEmbedding(shape[1], shape[-1])
    elif kind == "mha":
        m = SelfAttention(shape[-1], attrs["heads"], attrs.get("dropout", 0.0), attrs.get("batchFirst", False), attrs.get("needWeights", True))
    elif kind == "fire":
        m = Fire(shape[1], attrs["squeeze"], attrs["expand1x1"], attrs["expand3x3"])
    elif kind == "mbconv":
        cnf = MBConvConfig(attrs["expandRatio"], attrs["kernel"], attrs.get("stride", 1), shape[1], attrs["out"], 1)
        m = MBConv(cnf, attrs.get("sdProb", 0.0), nn.BatchNorm2d)
    elif kind == "residual":
        body, body_shape = build_sequential(children or [], shape, path + ["children"])
        if body_shape != shape:
            raise SpecError(path, f"residual body changes the shape {list(shape)} -> {list(body_shape)}")
        m = Residual(body, inplace=attrs.get("inplace", False))
    elif kind == "branch":
        merge = attrs.get("merge")
        if merge not in ("add", "mul", "concat"):
            raise SpecError(path, f"branch merge: expected add|mul|concat, received {merge!r}")
        if not children:
            raise SpecError(path, "branch needs at least one path")
        seqs = []
        for i, ch in enumerate(children):
            seq, _ = build_sequential(ch, shape, path + ["children", i])
            seqs.append(seq)
        m = Branch(seqs, merge)
    else:  # pragma: no cover
        raise SpecError(path, f"unhandled kind {kind}")
    return m, _probe(m, shape)


def build_sequential(layers: Any, shape: Shape, path=None) -> Tuple[nn.Sequential, Shape]:
    path = path or []
    if not isinstance(layers, list):
        raise SpecError(path, f"expected a list of layers, received {layers!r}")
    mods = []
    for i, layer in enumerate(layers):
        m, shape = build_layer(layer, shape, path + [i])
        mods.append(m)
    return nn.Sequential(*mods), shape


def build_model(case: dict) -> nn.Module:
    model, _ = build_sequential(case["layers"], tuple(case["input"]))
    return model


# --------------------------------------------------------------------------------------------
# the classic UNet (vram-ts: unet() in src/catalog/unet.ts), written here as the ground truth
# --------------------------------------------------------------------------------------------


class DoubleConv(nn.Module):
    """(3×3 conv without bias, BatchNorm2d, ReLU(inplace)) × 2."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    """2×2 transposed conv halving the channels, cat([skip, x]), DoubleConv (sizes multiples of 16: no padding)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x, skip):
        x = self.up(x)
        x = torch.cat([skip, x], dim=1)
        return self.conv(x)


class OutConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 2, base: int = 64) -> None:
        super().__init__()
        b = base
        self.inc = DoubleConv(in_channels, b)
        self.down1 = Down(b, 2 * b)
        self.down2 = Down(2 * b, 4 * b)
        self.down3 = Down(4 * b, 8 * b)
        self.down4 = Down(8 * b, 16 * b)
        self.up1 = Up(16 * b, 8 * b)
        self.up2 = Up(8 * b, 4 * b)
        self.up3 = Up(4 * b, 2 * b)
        self.up4 = Up(2 * b, b)
        self.outc = OutConv(b, num_classes)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)


def build_unet(case: dict) -> nn.Module:
    return UNet(case["input"][1], case.get("numClasses", 2), case.get("base", 64))
