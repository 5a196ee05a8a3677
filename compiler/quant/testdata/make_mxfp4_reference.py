"""Writes mxfp4_reference.json: torchao's MXFP4 quantization (OCP MX v1.0, FLOOR scale mode) of
blocks chosen to cover the rule's corners, for compiler/quant/mxfp4_test.cc.

torchao (pytorch/ao, torchao.prototype.mx_formats) is an MX implementation nobody here wrote; its
FLOOR mode is the OCP v1.0 scale rule (exponent = floor(log2 amax) - 2). Our QuantizeMxfp4 tries
that exponent and the next one: the test checks its OCP candidate against these codes element for
element, and that the exponent it keeps never has a larger block error.

Run (torchao is not in scripts/install-deps.sh: no test imports it): pip install torchao, then
/work/venv/bin/python compiler/quant/testdata/make_mxfp4_reference.py
"""
import json
import os

import torch
from torchao.prototype.mx_formats import mx_tensor
from torchao.prototype.mx_formats.config import ScaleCalculationMode

BLOCK = 32


def blocks():
    g = torch.Generator().manual_seed(21)
    named = []
    for i in range(24):  # gaussian rows at scales from 2^-20 to 2^20
        named.append((f"random_{i}", torch.randn(BLOCK, generator=g) * 2.0 ** (i * 40 / 23 - 20)))
    named.append(("zero", torch.zeros(BLOCK)))
    named.append(("huge", torch.tensor([3.0e38, -3.0e38] * 16)))
    named.append(("max_float", torch.tensor([torch.finfo(torch.float32).max] + [-1.0e30] * 31)))
    named.append(("tiny", torch.tensor([1.0e-40, -3.0e-39, 2.0e-45] + [1.0e-41] * 29)))  # exponent clamp at 0
    named.append(("small_normal", torch.tensor([1.5e-38, -1.2e-38] * 16)))
    # Ratios exactly between two E2M1 values (amax 4 -> scale 1): ties to the even mantissa, and
    # values in (6, 8) that the OCP exponent saturates.
    halves = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0,
              0.1, -0.1, 7.0, -7.5, 6.5, 4.0, 0.0, -0.0, 1.0, 1.5, 2.0, 3.0, 6.0, -6.0, 0.5, -0.5,
              5.5, 4.5]
    named.append(("halfway", torch.tensor(halves)))
    named.append(("halfway_scaled", torch.tensor(halves) * 2.0 ** -9))
    named.append(("clip_7_9", torch.tensor([7.9] + [0.3 * (i % 7) for i in range(31)])))
    return named


def main():
    out = []
    for name, values in blocks():
        values = values.to(torch.float32)
        scale, packed = mx_tensor.to_mx(values.reshape(1, BLOCK), torch.float4_e2m1fn_x2, BLOCK,
                                        ScaleCalculationMode.FLOOR)
        packed = packed.view(torch.uint8).reshape(-1)
        codes = []
        for byte in packed.tolist():  # element 2j in the low nibble (checked below on "halfway")
            codes += [byte & 15, byte >> 4]
        exponent = int(scale.view(torch.uint8).reshape(-1)[0])
        out.append({"name": name, "values": [float(v) for v in values.tolist()],
                    "exponent": exponent, "codes": codes})
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    halfway = next(b for b in out if b["name"] == "halfway")
    assert halfway["exponent"] == 127, halfway  # amax 7.5: floor(log2) = 2 -> 2^0
    assert e2m1[halfway["codes"][19]] == 4.0 and e2m1[halfway["codes"][22]] == 1.0, halfway
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mxfp4_reference.json")
    with open(path, "w") as f:
        json.dump({"source": "torchao.prototype.mx_formats.mx_tensor.to_mx, FLOOR", "blocks": out},
                  f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
