"""The figures behind lab 08's same-kind tolerances (helpers/thresholds.py, LOWP_SPREAD_* and CHECKPOINT_SAVED_SHARE).

For bf16 and for fp16 with a GradScaler, on the CPU sizes of the lab's model (or on the GPU with --device cuda):
how far runs of the course's own step land from it when their arithmetic rounds differently (initial weights
moved by fp32's rounding, LOWP_SPREAD_PERTURBATION), as a share of the parameters' change after 4 steps and of
the losses; then how far the wrong steps a learner may write land (a learning rate 10% and 20% off, fp32, no
zero_grad). Last, the memory a checkpointed forward keeps for backward against a plain one.

    python tools/same_kind_spread.py [--runs 16] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    from helpers.checks import behaviour as b
    from helpers.workloads import gpu_bound as gb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16, help="perturbed runs per precision")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(1)

    def step_with(dtype, scaler, lr=1.0, zero=True):
        inner = b._course_lowp_step(dtype, scaler)

        def step(model, opt, x, y):
            for group in opt.param_groups:
                group["lr"] = gb.LR * lr
            if dtype == torch.float32:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                if zero:
                    opt.zero_grad(set_to_none=True)
                return loss.detach()
            if not zero:
                with torch.autocast(x.device.type, dtype=dtype):
                    loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss.detach()
            return inner(model, opt, x, y)
        return step

    for name, dtype, scaler in (("bf16", torch.bfloat16, None), ("fp16 + GradScaler", torch.float16, (65536.0, 2.0, 0.5, 2000))):
        recs, update, _ = b._lowp_run(step_with(dtype, scaler), device, args.steps)
        losses = [r.returned for r in recs]

        def away(run: tuple, update=update, losses=losses) -> tuple[float, float]:
            r, u, _ = run
            return float((u - update).norm() / update.norm()), max(b._rel(x.returned, y) for x, y in zip(r, losses))

        spread = sorted(away(b._lowp_run(step_with(dtype, scaler), device, args.steps, perturb_seed=s))
                        for s in range(1, args.runs + 1))
        print(f"{name}: {args.runs} runs rounding differently land {', '.join(f'{u:.2%}' for u, _ in spread)} of the update "
              f"away; losses up to {max(lo for _, lo in spread):.3%}")
        for label, kw in (("learning rate +10%", {"lr": 1.1}), ("learning rate +20%", {"lr": 1.2}), ("no zero_grad", {"zero": False})):
            u, lo = away(b._lowp_run(step_with(dtype, scaler, **kw), device, args.steps))
            print(f"  {label:20s} update {u:.2%} away, losses {lo:.3%}")
        u, lo = away(b._lowp_run(step_with(torch.float32, None), device, args.steps))
        print(f"  {'fp32':20s} update {u:.2%} away, losses {lo:.3%}")

    torch.manual_seed(0)
    model = gb.Net(128, gb.DEPTH).train()
    x = torch.randn(256, 128)
    keep = (x, *model.parameters())
    plain = b.kept_for_backward(lambda: model(x), keep)[0]

    def every_block():
        h = x
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return model.head(h)

    kept = b.kept_for_backward(every_block, keep)[0]
    print(f"checkpointing every block (width 128, batch 256): keeps {kept / 2**20:.2f} MiB for backward against "
          f"{plain / 2**20:.2f} MiB plain ({kept / plain:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
