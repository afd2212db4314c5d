"""Do the compiled kernels give the same float32 bits for the same values in another memory layout?

Eligibility traces (gamma 0.999, lambda_ 1, dones at 2e-3) at four shapes that take different plans, inputs
contiguous and column-major (``w.t().contiguous().t()``, strides (1, T)), each against the float64 torch backend
(errors relative to each column's largest |value|). Prints one line per shape; needs a CUDA GPU.

Usage: python scripts/check_layout_bits.py    (from the repository root)
"""
import argparse
import sys

import torch

import kernels as K


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    F = torch.float64
    for T, N in [(4097, 32), (1024, 4096), (256, 32768), (5000, 8)]:
        g = torch.Generator().manual_seed(0)
        x = (torch.randn(T, N, generator=g, dtype=F) * 1000 + 100).float().cuda()
        torch.randn(T, N, generator=g, dtype=F)  # kept: the recorded runs drew values here
        te = (torch.rand(T, N, generator=g) < 2e-3).cuda()
        tr = lambda w: w.t().contiguous().t()          # same values, strides (1, T)
        f = lambda a, b, be: K.compute_eligibility_traces(a, b, gamma=.999, lambda_=1., backend=be)
        e = f(x.double(), te, "torch"); b = f(x, te, "triton"); c = f(tr(x), tr(te), "triton")
        col = e.abs().amax(0)
        print(T, N, "err contig %.2e, err transposed %.2e, |contig-transposed|/col %.2e, bits differ at %d of %d" % (
            ((b.double() - e).abs() / col).max(), ((c.double() - e).abs() / col).max(),
            ((b.double() - c.double()).abs() / col).max(), int((b != c).sum()), b.numel()))


if __name__ == "__main__":
    main()
