"""Our FNO2d against neuraloperator's FNO on one small Darcy data set, trained by the same loop, epochs interleaved.

Both models see the same normalised data, batches, loss (relative L2 in physical units), optimizer (Adam: the
fused kernel where the parameters allow it, which neuraloperator's complex-valued weights do not),
one-cycle schedule, gradient clipping and model selection (best validation epoch), so what differs is the model and
its implementation.  Epochs alternate between the models (model A epoch 1, model B epoch 1, ...), so their epoch
times are taken under the same machine load.  A bare training step of each model is also timed round-robin.

neuraloperator is not a dependency of opformer: install it beside it to run this (``pip install neuraloperator``;
it needs no other torch).

Usage:  python benchmarks/compare_neuraloperator.py --data data/d17.h5 [--n-train 512 --n-val 50 --n-test 100]
            [--epochs 30 --batch-size 16 --seeds 1127802 2 3] [--threads 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import h5py
import numpy as np
import torch

from opformer.bench.measure import interleaved_times, loadavg, machine_info
from opformer.models import build_model
from opformer.tasks.losses import rel_l2
from opformer.train.module import make_adam


def _load(path, keys, n_train, n_val, n_test):
    with h5py.File(path, "r") as h5:
        a, u = (np.asarray(h5[k], dtype=np.float32) for k in keys)
    if n_train + n_val + n_test > len(a):
        sys.exit(f"--data holds {len(a)} samples, fewer than --n-train + --n-val + --n-test")
    split = {"train": slice(0, n_train), "val": slice(n_train, n_train + n_val), "test": slice(len(a) - n_test, None)}
    return {k: (torch.from_numpy(a[s]), torch.from_numpy(u[s])) for k, s in split.items()}


class _Gauss:  # per-point mean and std of the training samples
    def __init__(self, t):
        self.mean, self.std = t.mean(0), t.std(0) + 1e-6

    def enc(self, t):
        return (t - self.mean) / self.std

    def dec(self, t):
        return t * self.std + self.mean


class _Ours(torch.nn.Module):
    def __init__(self, h, w, **cfg):
        super().__init__()
        self.net = build_model({"name": "fno2d", **cfg})
        gx, gy = torch.linspace(0, 1, h), torch.linspace(0, 1, w)
        self.register_buffer("coords", torch.stack(torch.meshgrid(gx, gy, indexing="ij"), -1)[None])

    def forward(self, a):  # (batch, H, W) -> (batch, H, W)
        return self.net(a[..., None], self.coords.expand(a.shape[0], -1, -1, -1))[..., 0]


class _Theirs(torch.nn.Module):
    def __init__(self, **cfg):
        super().__init__()
        from neuralop.models import FNO

        self.net = FNO(in_channels=1, out_channels=1, **cfg)

    def forward(self, a):
        return self.net(a[:, None])[:, 0]


def _n_params(m):
    return sum(p.numel() for p in m.parameters())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a Darcy file (opformer data darcy ...), .h5")
    ap.add_argument("--keys", default="coeff,sol")
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-val", type=int, default=50)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1127802])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--step-repeats", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        import neuralop
    except ImportError:
        sys.exit("neuraloperator is not installed: pip install neuraloperator")
    torch.set_num_threads(args.threads)
    data = _load(args.data, args.keys.split(","), args.n_train, args.n_val, args.n_test)
    h, w = data["train"][0].shape[1:]
    na, nu = _Gauss(data["train"][0]), _Gauss(data["train"][1])
    modes = min(12, h // 2, w // 2 + 1)  # what opformer's FNO2d keeps on this grid
    makers = {
        f"opformer FNO2d (width 32, modes {modes}, 4 layers)": lambda: _Ours(h, w, width=32, modes=modes),
        "neuraloperator FNO (n_modes 16x16, hidden 32, 4 layers)": lambda: _Theirs(n_modes=(16, 16),
                                                                                   hidden_channels=32, n_layers=4),
    }
    print(f"machine: {machine_info()}\nneuraloperator {neuralop.__version__}, torch {torch.__version__}, "
          f"{args.threads} thread(s); data {args.data} {h}x{w}: {args.n_train}/{args.n_val}/{args.n_test}, "
          f"{args.epochs} epochs, batch {args.batch_size}", flush=True)
    record = {"machine": machine_info(), "args": vars(args), "runs": []}
    xs = {k: na.enc(a) for k, (a, _) in data.items()}
    for seed in args.seeds:
        models, opts, scheds, best = {}, {}, {}, {}
        for name, make in makers.items():
            torch.manual_seed(seed)
            m = make()
            models[name] = m
            opts[name] = make_adam(m.parameters(), lr=args.lr)
            steps = args.epochs * -(-args.n_train // args.batch_size)
            scheds[name] = torch.optim.lr_scheduler.OneCycleLR(opts[name], max_lr=args.lr, total_steps=steps,
                                                               pct_start=0.3, div_factor=1e4, final_div_factor=1e4)
            best[name] = (float("inf"), None, 0)
        epoch_s = {name: [] for name in models}
        gen = torch.Generator().manual_seed(seed)
        for epoch in range(args.epochs):
            order = torch.randperm(args.n_train, generator=gen)
            for name, m in models.items():
                t0 = time.perf_counter()
                m.train()
                for lo in range(0, args.n_train, args.batch_size):
                    idx = order[lo : lo + args.batch_size]
                    loss = rel_l2(nu.dec(m(xs["train"][idx])), data["train"][1][idx]).mean()
                    opts[name].zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.999)
                    opts[name].step()
                    scheds[name].step()
                m.eval()
                with torch.no_grad():
                    val = rel_l2(nu.dec(m(xs["val"])), data["val"][1]).mean().item()
                epoch_s[name].append(time.perf_counter() - t0)
                if val < best[name][0]:
                    best[name] = (val, copy.deepcopy(m), epoch)
            print(f"seed {seed} epoch {epoch + 1}/{args.epochs}: "
                  + ", ".join(f"{n.split()[0]} val {best[n][0]:.3e}" for n in models), flush=True)
        for name in models:
            m = best[name][1]  # the model of the best validation epoch
            m.eval()
            with torch.no_grad():
                test = rel_l2(nu.dec(m(xs["test"])), data["test"][1]).mean().item()
            record["runs"].append({"model": name, "seed": seed, "parameters": _n_params(m), "test_rel_l2": test,
                                   "val_rel_l2": best[name][0], "best_epoch": best[name][2],
                                   "epoch_s_median": statistics.median(epoch_s[name])})
    # bare steps, round-robin
    bx, by = xs["train"][: args.batch_size], data["train"][1][: args.batch_size]
    steps = {}
    for name, make in makers.items():
        m = make()
        opt = make_adam(m.parameters(), lr=1e-4)

        def step(m=m, opt=opt):
            loss = rel_l2(nu.dec(m(bx)), by).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps[name] = lambda step=step: [step() for _ in range(10)]
    times = interleaved_times(steps, repeats=args.step_repeats, warmup=1)
    step_s = {name: [t / 10 for t in ts] for name, ts in times.items()}  # per step
    names = list(makers)
    ref = names[1]
    print(f"\nload average after (1, 5, 15 min): {loadavg()}")
    print(f"| model | parameters | test rel. L2, mean ± std over seeds {args.seeds} | epoch [s] (median) | "
          f"bare step [ms] | step / neuraloperator's |")
    print("|---|---|---|---|---|---|")
    ref_step = statistics.median(step_s[ref])
    summary = {}
    for name in names:
        runs = [r for r in record["runs"] if r["model"] == name]
        errs = [r["test_rel_l2"] for r in runs]
        sd = statistics.stdev(errs) if len(errs) > 1 else 0.0
        st = statistics.median(step_s[name])
        ep = statistics.median(r["epoch_s_median"] for r in runs)
        summary[name] = {"test_mean": statistics.mean(errs), "test_std": sd, "tests": errs, "epoch_s": ep,
                         "step_s": st, "step_ratio": st / ref_step, "parameters": runs[0]["parameters"]}
        print(f"| {name} | {runs[0]['parameters']:,} | {statistics.mean(errs):.3e} ± {sd:.2e} "
              f"({', '.join(f'{e:.3e}' for e in errs)}) | {ep:.2f} | {st * 1e3:.1f} | {st / ref_step:.2f} |")
    record["summary"] = summary
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
