"""torchinfo text of torchvision 0.14 classifiers, for vram-ts's vision catalog (src/catalog/vision.ts).

Writes test/fixtures/compat/vision/<model>_<classes>cls_<input>.txt: what `torchinfo.summary(model,
input_size=...)` prints (torchinfo main 5c4164f, as make_fixtures.py; models in train mode, as
constructed; random weights). test/catalog/vision-torchinfo.test.ts compares vram-ts's
summary(vision(name), { format: 'torchinfo' }) with them byte for byte.

    /usr/bin/python3 tools/compat/vision_torchinfo.py --torchinfo /tmp/torchinfo
"""

import argparse
import contextlib
import io
import os
import sys

CASES = [
    ("resnet18", 1000, (1, 3, 224, 224)),
    ("resnet50", 10, (2, 3, 224, 224)),
    ("efficientnet_b0", 1000, (1, 3, 224, 224)),
    ("efficientnet_b0", 3, (1, 3, 197, 231)),
    ("vit_b_16", 1000, (1, 3, 224, 224)),
    ("vit_b_32", 10, (2, 3, 224, 224)),
    ("mobilenet_v2", 1000, (1, 3, 224, 224)),
    ("mobilenet_v3_large", 10, (1, 3, 224, 224)),
    ("squeezenet1_1", 1000, (1, 3, 224, 224)),
    ("squeezenet1_1", 10, (2, 3, 97, 131)),
    ("vgg11_bn", 10, (1, 3, 224, 224)),
    ("densenet121", 1000, (1, 3, 224, 224)),
    ("regnet_y_400mf", 1000, (1, 3, 224, 224)),
    ("efficientnet_v2_s", 1000, (1, 3, 224, 224)),
    ("convnext_tiny", 10, (1, 3, 224, 224)),
    ("resnet34", 1000, (1, 3, 224, 224)),
    ("resnet101", 1000, (1, 3, 224, 224)),
    ("resnet152", 1000, (1, 3, 224, 224)),
    ("resnext50_32x4d", 1000, (1, 3, 224, 224)),
    ("resnext101_32x8d", 1000, (1, 3, 224, 224)),
    ("wide_resnet50_2", 1000, (1, 3, 224, 224)),
    ("wide_resnet101_2", 1000, (1, 3, 224, 224)),
    ("efficientnet_b1", 1000, (1, 3, 224, 224)),
    ("efficientnet_b2", 1000, (1, 3, 224, 224)),
    ("efficientnet_b3", 1000, (1, 3, 224, 224)),
    ("efficientnet_b4", 1000, (1, 3, 224, 224)),
    ("efficientnet_b5", 1000, (1, 3, 224, 224)),
    ("efficientnet_b6", 1000, (1, 3, 224, 224)),
    ("efficientnet_b7", 1000, (1, 3, 224, 224)),
    ("vit_l_16", 1000, (1, 3, 224, 224)),
    ("vit_l_32", 1000, (1, 3, 224, 224)),
    ("vit_h_14", 1000, (1, 3, 224, 224)),
    ("efficientnet_v2_m", 1000, (1, 3, 224, 224)),
    ("efficientnet_v2_l", 1000, (1, 3, 224, 224)),
    ("convnext_small", 1000, (1, 3, 224, 224)),
    ("convnext_base", 1000, (1, 3, 224, 224)),
    ("convnext_large", 1000, (1, 3, 224, 224)),
    ("mobilenet_v3_small", 1000, (1, 3, 224, 224)),
    ("vgg13_bn", 1000, (1, 3, 224, 224)),
    ("vgg16_bn", 1000, (1, 3, 224, 224)),
    ("vgg19_bn", 1000, (1, 3, 224, 224)),
    ("regnet_y_800mf", 1000, (1, 3, 224, 224)),
    ("regnet_y_1_6gf", 1000, (1, 3, 224, 224)),
    ("regnet_y_3_2gf", 1000, (1, 3, 224, 224)),
    ("regnet_y_8gf", 1000, (1, 3, 224, 224)),
    ("regnet_y_16gf", 1000, (1, 3, 224, 224)),
    ("swin_t", 1000, (1, 3, 224, 224)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torchinfo", required=True, help="folder holding torchinfo/ from TylerYep/torchinfo main")
    ap.add_argument("--out", default="test/fixtures/compat/vision")
    opts = ap.parse_args()
    sys.path.insert(0, opts.torchinfo)
    import torch
    import torchinfo
    import torchvision

    torch.manual_seed(0)
    os.makedirs(opts.out, exist_ok=True)
    for name, classes, size in CASES:
        model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            torchinfo.summary(model, input_size=size)
        path = os.path.join(opts.out, "%s_%dcls_%s.txt" % (name, classes, "x".join(str(d) for d in size)))
        with open(path, "w") as f:
            f.write(buf.getvalue())
        print(path)


if __name__ == "__main__":
    main()
