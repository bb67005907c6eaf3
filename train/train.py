"""Train strata-tiny v2 (qwen3_next: 2 Gated DeltaNet + 6 gated attention layers, MoE with a
shared expert) on one GPU with PyTorch and transformers' Qwen3NextForCausalLM.

Rows come from train/make_rows.py, which runs beside this process and writes shards of
8193-token rows (whole-file edits, code-assistant chats, code) while training consumes them.

Outputs under --out: config.json, run.json (hyper-parameters, timing), loss.csv, a checkpoint
(weights in the model's own parameter names, bf16, split in two safetensors files so each stays
small) rewritten every --ckpt-every seconds, DONE at the end. train/evaluate.py evaluates it.

Training differences from inference, none of which changes the function computed:
- the routed experts are evaluated densely (every expert on every token, weighted by the
  sparse top-k router weights, so non-selected experts get weight 0) instead of transformers'
  per-expert loop, which syncs the GPU once per expert;
- the Gated DeltaNet chunked recurrence runs in our train/gdn_fast.py (chunk 128, batched
  over chunks; the first v2 run spent most of its time in transformers' per-chunk loop), after
  a self-test against transformers' PyTorch reference on the GPU (choose_gdn);
- bf16 autocast, SDPA attention, fused AdamW, no host sync except every --log-every steps.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))

from strata import prompts  # noqa: E402

MODEL_CONFIG = dict(
    vocab_size=8192,
    hidden_size=320,
    num_hidden_layers=10,
    # v2: 6 of 8 layers are gated attention, 2 stay Gated DeltaNet (still a hybrid). Copying a
    # whole file of several thousand tokens exactly is an attention job (look up where you are
    # in the original, copy the next token); v1's 3:1 mix drifted on long files, and DeltaNet
    # layers are the slow part of training on long rows. v9: v8 grown by two attention layers
    # (grow.py --after 3,7), so the shape that ships (and a run from scratch) has 10.
    layer_types=["linear_attention", "full_attention", "full_attention", "full_attention", "full_attention",
                 "linear_attention", "full_attention", "full_attention", "full_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    partial_rotary_factor=0.25,
    rope_theta=100000.0,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=80,
    shared_expert_intermediate_size=320,
    intermediate_size=320,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    initializer_range=0.02,
)


def make_config(tokenizer):
    from transformers import Qwen3NextConfig

    cfg = dict(MODEL_CONFIG)
    cfg["vocab_size"] = tokenizer.get_vocab_size()
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    cfg.update(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    cfg["layer_types"] = list(cfg["layer_types"])
    rope = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta"),
            "partial_rotary_factor": cfg.pop("partial_rotary_factor")}
    return Qwen3NextConfig(rope_parameters=rope, **cfg)


# ----------------------------------------------------------------------------- model patches

def dense_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """Same function as Qwen3NextExperts.forward (weights of non-selected experts are 0), without
    the per-expert loop: all experts in two matrix products."""
    n, h = hidden_states.shape
    e, two_i, _ = self.gate_up_proj.shape
    weights = torch.zeros(n, e, dtype=top_k_weights.dtype, device=hidden_states.device)
    weights.scatter_(1, top_k_index, top_k_weights)
    gate_up = F.linear(hidden_states, self.gate_up_proj.reshape(e * two_i, h)).view(n, e, two_i)
    gate, up = gate_up.chunk(2, dim=-1)
    act = self.act_fn(gate) * up * weights.unsqueeze(-1).to(up.dtype)
    down = self.down_proj.permute(1, 0, 2).reshape(h, e * (two_i // 2))
    return F.linear(act.reshape(n, -1), down)


def patch_experts():
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    mq.Qwen3NextExperts.forward = dense_experts_forward


def force_torch_gdn() -> None:
    """Make transformers run its PyTorch Gated DeltaNet even where `fla` imports: its
    decorator picks fla's kernels by itself when the package is importable (the first v2 run
    crashed that way: fla 0.5.2 refuses the gated backward on Hopper with Triton < 3.7.1)."""
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        fn = getattr(mq, name)
        setattr(mq, name, getattr(fn, "__wrapped__", fn))


def choose_gdn(log, mode: str, device: str) -> str:
    """Put our chunked gated delta rule (gdn_fast.py) in place of transformers' PyTorch one, unless
    mode is "reference". With "auto" on a GPU it is first checked against the reference on a
    random input of the model's head sizes (forward and gradients, bf16 inputs) and timed
    against it; the faster of the two that is correct is used. Same function either way."""
    import gdn_fast

    force_torch_gdn()
    if mode == "reference":
        log("gdn: transformers' torch_chunk_gated_delta_rule")
        return "reference"
    if mode == "fast" or device != "cuda":
        gdn_fast.install()
        log("gdn: gdn_fast.chunk_gated_delta_rule")
        return "fast"
    from transformers.models.qwen3_next import modeling_qwen3_next as mq

    reference = mq.torch_chunk_gated_delta_rule
    try:
        gen = torch.Generator(device="cuda").manual_seed(0)
        b, t, h, d = 4, 4000, MODEL_CONFIG["linear_num_value_heads"], MODEL_CONFIG["linear_key_head_dim"]
        mk = lambda *shape: torch.randn(*shape, device="cuda", generator=gen)  # noqa: E731
        q, k, v = (mk(b, t, h, d).bfloat16().requires_grad_() for _ in range(3))
        g = (-torch.rand(b, t, h, device="cuda", generator=gen) * 2).requires_grad_()
        beta = torch.rand(b, t, h, device="cuda", generator=gen).bfloat16().requires_grad_()
        outs, times = [], []
        for fn in (reference, gdn_fast.chunk_gated_delta_rule):
            for rep in range(3):
                torch.cuda.synchronize()
                t0 = time.time()
                o, _ = fn(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
                grads = torch.autograd.grad(o.float().square().sum(), (q, k, v, g, beta))
                torch.cuda.synchronize()
            times.append(time.time() - t0)
            outs.append([o.float()] + [x.float() for x in grads])
        errs = [float((a - b_).norm() / b_.norm().clamp_min(1e-9)) for b_, a in zip(*outs)]
        log(f"gdn: fast vs reference relative error (out, dq, dk, dv, dg, dbeta) {[round(e, 5) for e in errs]}; "
            f"fwd+bwd {times[0] * 1000:.1f} ms reference, {times[1] * 1000:.1f} ms fast")
        if not all(e < 2e-2 for e in errs):
            log("gdn: fast does not match the reference; using the reference")
            return "reference"
        if times[1] > times[0]:
            log("gdn: the reference is faster here; using it")
            return "reference"
    except Exception as exc:  # noqa: BLE001 - any failure of the self-test: keep the reference
        log(f"gdn: fast self-test failed ({type(exc).__name__}: {exc}); using the reference")
        return "reference"
    gdn_fast.install()
    log("gdn: gdn_fast.chunk_gated_delta_rule")
    return "fast"


class ShardFeed:
    """Training rows from make_rows.py's shards (rows_NNNN.npy), in shard order, as they appear.
    If training catches up with the producer it re-reads rows it has already trained on (the
    count is logged and kept in run.json) instead of waiting. With marks=True each row comes with
    its marks (marks_NNNN.npy, written by the producer before the rows; see loss_weights)."""

    def __init__(self, folder: Path, batch: int, seed: int, log, marks: bool = False, copies: bool = False):
        self.folder, self.batch, self.log, self.marks, self.copies = folder, batch, log, marks, copies
        self.rng = np.random.default_rng(seed)
        self.loaded: list[np.ndarray] = []
        self.next_shard = 0
        self.queue: list[int] = []  # indices into the concatenation of loaded shards
        self.reused_rows = 0
        self.n_loaded = 0

    def _load_new(self) -> bool:
        got = False
        while (self.folder / f"rows_{self.next_shard:04d}.npy").exists():
            arr = np.load(self.folder / f"rows_{self.next_shard:04d}.npy")
            channels = [arr]
            for name, wanted in (("marks", self.marks), ("copies", self.copies)):
                if not wanted:
                    continue
                path = self.folder / f"{name}_{self.next_shard:04d}.npy"
                if not path.exists():
                    raise SystemExit(f"{path.name}: missing (the producer writes it with --{name})"
                                     if name == "copies" else f"{path.name}: missing")
                m = np.load(path)
                if m.shape != arr.shape:
                    raise SystemExit(f"{path.name}: shape {m.shape}, rows {arr.shape}")
                channels.append(m.astype(arr.dtype))
            if len(channels) > 1:
                arr = np.stack(channels, axis=1)  # (rows, 1 + marks + copies, width)
            self.loaded.append(arr)
            self.queue += list(self.n_loaded + self.rng.permutation(len(arr)))
            self.n_loaded += len(arr)
            self.next_shard += 1
            got = True
        if got:
            self.pool = np.concatenate(self.loaded) if len(self.loaded) > 1 else self.loaded[0]
            self.loaded = [self.pool]
        return got

    def wait_first(self, timeout=900):
        t0 = time.time()
        while not self._load_new():
            if time.time() - t0 > timeout:
                raise SystemExit(f"no rows in {self.folder} after {timeout}s")
            time.sleep(1)

    def next_batch(self) -> np.ndarray:
        if len(self.queue) < self.batch:
            self._load_new()
        if len(self.queue) < self.batch:
            self.queue += list(self.rng.permutation(self.n_loaded))
            self.reused_rows += self.n_loaded
            self.log(f"caught up with the producer: re-reading {self.n_loaded} rows")
        out, self.queue = self.queue[:self.batch], self.queue[self.batch:]
        return self.pool[np.asarray(out)]  # (batch, width), or (batch, channels, width)


class RouterTap:
    """Collects router logits for the load-balancing loss."""

    def __init__(self, model):
        self.logits = []
        from transformers.models.qwen3_next import modeling_qwen3_next as mq

        for mod in model.modules():
            if isinstance(mod, mq.Qwen3NextTopKRouter):
                mod.register_forward_hook(self._hook)
        self.top_k = model.config.num_experts_per_tok
        self.num_experts = model.config.num_experts

    def _hook(self, mod, args, out):
        self.logits.append(out[0])

    def aux_loss(self, mask):
        """Switch-style balance loss averaged over layers, on non-padding tokens."""
        losses = []
        m = mask.reshape(-1).float()
        for logits in self.logits:
            probs = logits.float().softmax(-1)
            top = probs.topk(self.top_k, dim=-1).indices
            hits = torch.zeros_like(probs).scatter_(1, top, 1.0)
            frac = (hits * m[:, None]).sum(0) / (m.sum() * self.top_k)
            pmean = (probs * m[:, None]).sum(0) / m.sum()
            losses.append(self.num_experts * (frac * pmean).sum())
        self.logits = []
        return torch.stack(losses).mean()


# ------------------------------------------------------------------------------ checkpoint

PART_BYTES = 15_000_000  # each checkpoint file stays under the 16 MiB a GPU call can return


def save_checkpoint(model, out: Path, tag: str):
    """bf16 weights in files ckpt_0.safetensors, ckpt_1, ... of at most PART_BYTES each
    (written to .tmp and renamed, so a reader never sees half a file)."""
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    parts, cur, size = [], [], 0
    for k in sorted(sd):
        n = sd[k].numel() * 2
        if cur and size + n > PART_BYTES:
            parts.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += n
    parts.append(cur)
    for old in out.glob("ckpt_*.safetensors"):
        if int(old.name.split("_")[1].split(".")[0]) >= len(parts):
            old.unlink()
    for i, keys in enumerate(parts):
        tmp = out / f"ckpt_{i}.safetensors.tmp"
        save_file({k: sd[k] for k in keys}, str(tmp), metadata={"tag": tag, "parts": str(len(parts))})
        os.replace(tmp, out / f"ckpt_{i}.safetensors")


def read_checkpoint(folder: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted(folder.glob("ckpt_*.safetensors"), key=lambda p: int(p.name.split("_")[1].split(".")[0]))
    if not files:
        raise SystemExit(f"{folder}: no ckpt_*.safetensors")
    sd = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def load_checkpoint(model, folder: Path):
    sd = read_checkpoint(folder)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"checkpoint mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")


def prompt_ids(tokenizer) -> dict:
    """Token ids that loss_mask() needs, from the tokenizer itself."""
    from strata import prompts

    tid = tokenizer.token_to_id
    head = tokenizer.encode(prompts.IM_START + "assistant\n").ids
    if head[0] != tid(prompts.IM_START):
        raise SystemExit("tokenizer: <|im_start|> is not one token")
    return {"eos": tid(prompts.ENDOFTEXT), "im_start": tid(prompts.IM_START), "file": tid(prompts.FILE),
            "rewrite": tid(prompts.REWRITE), "assistant": head[1:]}


def loss_weights(keep: torch.Tensor, marks: torch.Tensor, changed_weight: float, code_weight: float,
                 join_weight: float | None = None) -> torch.Tensor:
    """Per-label loss weights for --loss-on answer with marks (make_rows.change_marks, aligned
    with the labels): `changed_weight` on the rewrite tokens that carry a change (mark 2),
    `join_weight` (default: `changed_weight`) on the newline tokens at a change's joins (mark 3),
    1 on the rest of a rewrite (mark 1: copied tokens and <|endoftext|>), `code_weight` on the
    other labels that keep loss (mark 0: code, assistant replies), 0 where loss_mask masks."""
    join_weight = changed_weight if join_weight is None else join_weight
    w = torch.where(marks == 2, changed_weight, torch.where(marks == 3, join_weight,
                    torch.where(marks == 1, 1.0, code_weight)))
    return w * keep


NO_COPY = 65535  # make_rows.NO_COPY


def with_copy_bias(logits: torch.Tensor, copies: torch.Tensor, bias: float) -> torch.Tensor:
    """The logits `strata edit` samples from: `bias` added to the copy token of each position
    (copies aligned with the labels; NO_COPY where none), out of place."""
    has = copies != NO_COPY
    idx = torch.where(has, copies, torch.zeros_like(copies)).unsqueeze(-1)
    return logits.scatter_add(-1, idx, (has.to(logits.dtype) * bias).unsqueeze(-1))


def loss_mask(batch: torch.Tensor, ids: dict) -> torch.Tensor:
    """Which labels (batch[:, 1:]) carry loss: the prompt of an edit example (<|file|> up to and
    including <|rewrite|>) and every non-assistant chat turn (<|im_start|>user ... up to the next
    <|im_start|>) are masked; the rewrite with its <|endoftext|>, assistant replies with their
    <|im_end|>, and code carry loss. Each position takes the state of the last marker at or
    before it; a row without markers (pure code) keeps full loss."""
    b, w = batch.shape
    ev = torch.zeros_like(batch, dtype=torch.int8)  # 0 no marker, 1 masked from here, 2 loss from here
    ev[:, 1:][batch[:, :-1] == ids["rewrite"]] = 2
    ev[:, 1:][batch[:, :-1] == ids["eos"]] = 2
    start = batch == ids["im_start"]
    ev[start | (batch == ids["file"])] = 1
    head = ids["assistant"]
    k = len(head)
    if k < w:
        is_asst = start[:, : w - k].clone()
        for j, t in enumerate(head):
            is_asst &= batch[:, 1 + j: w - k + 1 + j] == t
        ev[:, k + 1:][is_asst[:, : w - k - 1]] = 2
    pos = torch.arange(w, device=batch.device).expand(b, w)
    last = torch.where(ev > 0, pos, torch.full_like(pos, -1)).cummax(dim=1).values
    state = torch.where(last >= 0, ev.gather(1, last.clamp(min=0)), torch.full_like(ev, 2))
    return state[:, 1:] == 2


# ----------------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=Path, required=True, help="make_rows.py output folder (shards appear while training)")
    ap.add_argument("--tok", type=Path, required=True, help="folder with tokenizer.json")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=0,
                    help="rows per step; 0: sized from the peak memory of a probe step (GPU), 8 on a CPU")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--mem-frac", type=float, default=0.72, help="share of GPU memory the sized batch may use")
    ap.add_argument("--crop", type=int, default=0, help="train on the first CROP tokens of each row (0: whole rows)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=7.0, help="training time budget (schedule follows it)")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="unix time at which training ends (overrides --minutes; the budget is counted from the first step)")
    ap.add_argument("--ckpt-every", type=float, default=60.0)
    ap.add_argument("--log-every", type=int, default=10, help="host syncs (loss.item()) only every N steps")
    ap.add_argument("--init-from", type=Path, default=None, help="folder with ckpt_*, or an exported model folder, to continue from")
    ap.add_argument("--gdn", choices=("auto", "fast", "reference"), default="auto",
                    help="Gated DeltaNet chunk function: ours (gdn_fast.py), transformers', or auto (self-test on GPU)")
    ap.add_argument("--loss-on", choices=("all", "answer"), default="all",
                    help="answer: no loss on edit prompts (file + instruction) and user/system chat turns")
    ap.add_argument("--changed-weight", type=float, default=1.0,
                    help="with --loss-on answer: loss weight of rewrite tokens that carry a change (needs the producer's marks)")
    ap.add_argument("--join-weight", type=float, default=None,
                    help="with marks: loss weight of the newline tokens at a change's joins (default: --changed-weight)")
    ap.add_argument("--code-weight", type=float, default=1.0,
                    help="with --loss-on answer and marks: loss weight of answer tokens outside rewrites (code, chat replies)")
    ap.add_argument("--copy-bias", type=float, default=0.0,
                    help="with --loss-on answer: add this to the logit of strata edit's copy token at each rewrite "
                         "position before the loss (the producer's --copies), so the model is trained for the copy "
                         "bias it runs with (0: off)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a very small model for a CPU smoke test")
    args = ap.parse_args()
    if args.copy_bias and args.loss_on != "answer":
        raise SystemExit("--copy-bias needs --loss-on answer")
    if not (args.copy_bias >= 0 and math.isfinite(args.copy_bias)):
        raise SystemExit(f"--copy-bias must be a finite number >= 0, not {args.copy_bias}")
    use_marks = args.changed_weight != 1.0 or args.code_weight != 1.0 or args.join_weight not in (None, 1.0)
    if use_marks and args.loss_on != "answer":
        raise SystemExit("--changed-weight/--join-weight/--code-weight need --loss-on answer")
    if args.join_weight is not None and args.join_weight < 0:
        raise SystemExit(f"--join-weight must be >= 0, not {args.join_weight}")
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "train_log.txt", "a")
    cuda = args.device == "cuda"

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    import transformers
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    log(f"torch {torch.__version__} transformers {transformers.__version__} device {args.device}")
    if cuda:  # the fp32 products of the gated delta rule (gdn_fast runs outside autocast) on tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
    gdn = choose_gdn(log, args.gdn, args.device)
    tokenizer = Tokenizer.from_file(str(args.tok / "tokenizer.json"))
    ids = prompt_ids(tokenizer)
    config = make_config(tokenizer)
    if args.tiny:
        config.hidden_size, config.num_experts, config.moe_intermediate_size = 64, 4, 16
        config.linear_key_head_dim = config.linear_value_head_dim = 16
        config.shared_expert_intermediate_size = 64

    patch_experts()
    if args.init_from and (args.init_from / "config.json").exists() and not list(args.init_from.glob("ckpt_*.safetensors")):
        model = Qwen3NextForCausalLM.from_pretrained(args.init_from, dtype=torch.float32, attn_implementation="sdpa")
        config = model.config
    else:
        model = Qwen3NextForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
        if args.init_from:
            load_checkpoint(model, args.init_from)
            log(f"initialised from {args.init_from}")
    model = model.to(args.device)
    log(f"attention: {model.config._attn_implementation}; layers {config.layer_types}")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters: {n_params} ({n_params * 2 / 1e6:.2f} MB in bf16)")
    (args.out / "config.json").write_text(config.to_json_string())
    tap = RouterTap(model)

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name or "A_log" in name or "dt_bias" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    def forward_backward(batch: torch.Tensor):
        """One forward and backward; returns the loss, the balance loss, the label count and
        (with marks) the mean loss on changed rewrite tokens and on the other rewrite tokens."""
        parts = ()
        if batch.dim() == 3:
            channels = batch
            batch = channels[:, 0]
            marks = channels[:, 1] if use_marks else None
            copies = channels[:, -1] if args.copy_bias else None
        inputs, labels = batch[:, :-1], batch[:, 1:]
        mask = torch.ones_like(labels, dtype=torch.bool)
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16):
            hidden = model.model(input_ids=inputs).last_hidden_state
            logits = model.lm_head(hidden)
        if args.loss_on == "answer":
            keep = loss_mask(batch, ids).reshape(-1)
            lf = logits.float()
            if args.copy_bias:  # the model learns what is left over once the copy bias is added
                lf = with_copy_bias(lf, copies[:, 1:], args.copy_bias)
            per_tok = F.cross_entropy(lf.view(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
            del lf
            if use_marks:
                m = marks[:, 1:].reshape(-1)
                w = loss_weights(keep, m, args.changed_weight, args.code_weight, args.join_weight)
                loss = (per_tok * w).sum() / w.sum().clamp(min=1e-6)
                pt = per_tok.detach()
                parts = tuple(((pt * sel).sum() / sel.sum().clamp(min=1)) for sel in ((m >= 2) & keep, (m == 1) & keep))
            else:
                n_keep = keep.sum()
                loss = (per_tok * keep).sum() / n_keep.clamp(min=1)
            del per_tok
        else:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))
        del logits
        aux = tap.aux_loss(mask)
        opt.zero_grad(set_to_none=True)
        (loss + args.aux_coef * aux).backward()
        return loss.detach(), aux.detach(), labels.numel(), parts

    if use_marks:
        join = args.changed_weight if args.join_weight is None else args.join_weight
        log(f"loss weights: changed rewrite tokens {args.changed_weight}, newlines at their joins {join}, other rewrite tokens 1, "
            f"code and chat answers {args.code_weight}")
    if args.copy_bias:
        log(f"copy bias in the loss: +{args.copy_bias:g} on the copy token of every rewrite position (the producer's copies)")
    feed = ShardFeed(args.rows, 1, args.seed, log, marks=use_marks, copies=bool(args.copy_bias))
    feed.wait_first()
    full = feed.pool.shape[-1]
    width = full if not args.crop else min(args.crop + 1, full)
    batch_size = args.batch or 8
    if cuda and not args.batch:
        # size the batch from the peak memory of one probe step (no optimizer step)
        probe = 2
        feed.batch = probe
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        forward_backward(torch.from_numpy(feed.next_batch()[..., :width].astype(np.int64)).to(args.device))
        opt.zero_grad(set_to_none=True)
        peak = torch.cuda.max_memory_allocated()
        total = torch.cuda.get_device_properties(0).total_memory
        per_row = (peak - base) / probe
        batch_size = int(max(1, min(args.max_batch, (args.mem_frac * total - base - 2 * 4 * n_params) // per_row)))
        log(f"probe: {per_row / 2**30:.2f} GiB per row of {width} tokens, base {base / 2**30:.2f} GiB, "
            f"device {total / 2**30:.1f} GiB -> batch {batch_size}")
        torch.cuda.empty_cache()
    feed.batch = batch_size
    run = {"args": {k: str(v) for k, v in vars(args).items()}, "model_config": config.to_dict(),
           "parameters": n_params, "gdn": gdn, "batch": batch_size, "row_tokens": width,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name() if cuda else "cpu"}
    (args.out / "run.json").write_text(json.dumps(run, indent=1))

    def next_batch() -> torch.Tensor:
        host = torch.from_numpy(feed.next_batch()[..., :width].astype(np.int64))
        return host.pin_memory().to(args.device, non_blocking=True) if cuda else host

    loss_csv = open(args.out / "loss.csv", "a")
    if loss_csv.tell() == 0:
        loss_csv.write("step,tokens,seconds,lr,loss,aux" + (",loss_changed,loss_copy" if use_marks else "") + "\n")
    t_start = time.time()
    budget = (args.deadline - t_start) if args.deadline else args.minutes * 60
    log(f"training budget {budget:.0f}s")
    step, tokens_seen = 0, 0
    last_ckpt = t_start
    ema = None
    model.train()
    batch = next_batch()
    while step < args.max_steps:
        elapsed = time.time() - t_start
        progress = max(step / args.max_steps, elapsed / budget)
        if progress >= 1.0:
            break
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            lr = args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        oom = False
        try:
            loss, aux, n_tok, parts = forward_backward(batch)
        except torch.cuda.OutOfMemoryError:
            if step > 5 or feed.batch <= 1:
                raise
            oom = True  # handled below, once the exception's frames (and their tensors) are gone
        if oom:
            opt.zero_grad(set_to_none=True)
            tap.logits = []
            del batch
            torch.cuda.empty_cache()
            feed.batch = max(1, feed.batch // 2)
            run["batch"] = feed.batch
            log(f"out of memory at step {step}: batch halved to {feed.batch}")
            batch = next_batch()
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        batch = next_batch()  # queued behind this step's kernels: no host sync
        step += 1
        tokens_seen += n_tok
        if step % args.log_every == 0 or step <= 3:
            lv, av = loss.item(), aux.item()
            pv = [p.item() for p in parts]
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            secs = time.time() - t_start
            loss_csv.write(f"{step},{tokens_seen},{secs:.1f},{lr:.6f},{lv:.4f},{av:.4f}"
                           + "".join(f",{v:.4f}" for v in pv) + "\n")
            loss_csv.flush()
            if step == 3 and cuda:
                log(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB at batch {feed.batch}")
            if step % 50 == 0 or step <= 3 or step <= 60:
                extra = f" changed {pv[0]:.3f} copy {pv[1]:.4f}" if pv else ""
                log(f"step {step} loss {lv:.4f} (ema {ema:.4f}){extra} aux {av:.3f} lr {lr:.2e} "
                    f"{tokens_seen / max(secs, 1e-9):.0f} tok/s {secs:.0f}s shards {feed.next_shard}")
        if time.time() - last_ckpt > args.ckpt_every:
            save_checkpoint(model, args.out, f"step {step}")
            last_ckpt = time.time()
    train_seconds = time.time() - t_start
    save_checkpoint(model, args.out, f"step {step}")
    run.update(steps=step, tokens_seen=tokens_seen, train_seconds=round(train_seconds, 1),
               shards_used=feed.next_shard, reused_rows=feed.reused_rows)
    (args.out / "run.json").write_text(json.dumps(run, indent=1))
    (args.out / "DONE").write_text(f"{step}\n")
    log(f"done: {step} steps, {tokens_seen} tokens, {train_seconds:.0f}s")


if __name__ == "__main__":
    main()
