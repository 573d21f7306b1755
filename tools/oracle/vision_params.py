"""Parameter totals and module trees of torchvision 0.14's classification models that vram-ts's
vision catalog builds (src/catalog/vision.ts), for numClasses 1000 and 10.

    /usr/bin/python3 tools/oracle/vision_params.py   # -> test/fixtures/vision/params.json
"""

import json
import os

import torch
import torchvision

NAMES = [
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d",
    "wide_resnet50_2", "wide_resnet101_2",
] + [f"efficientnet_b{i}" for i in range(8)] + ["vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"]
NAMES += ["efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l", "convnext_tiny", "convnext_small", "convnext_base", "convnext_large"]
NAMES += ["mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "squeezenet1_1", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "densenet121", "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf", "regnet_y_8gf", "regnet_y_16gf"]
NAMES += ["swin_t"]

out = {"env": {"torch": torch.__version__, "torchvision": torchvision.__version__}, "models": {}}
for name in NAMES:
    for classes in (1000, 10):
        model = getattr(torchvision.models, name)(weights=None, num_classes=classes)
        params = sum(p.numel() for p in model.parameters())
        modules = [[n, type(m).__name__, sum(p.numel() for p in m.parameters(recurse=False))] for n, m in model.named_modules()]
        out["models"][f"{name}/{classes}"] = {"params": params, "modules": modules}
        print(name, classes, params, flush=True)
os.makedirs("test/fixtures/vision", exist_ok=True)
with open("test/fixtures/vision/params.json", "w") as f:
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
