"""Train strata-tiny (qwen3_next: Gated DeltaNet + gated attention 3:1, MoE with a shared expert)
on one GPU with PyTorch and transformers' Qwen3NextForCausalLM.

Inputs (built on the CPU by train/build_data.py, train/train_tokenizer.py and
train/rewrite_tasks.py; see train/README.md):
  <data>/corpus/train.jsonl.gz, <data>/tok/tokenizer.json, <data>/heldout_tasks.jsonl.gz,
  <data>/corpus/heldout.jsonl.gz
Rewrite tasks for training are generated here from the training corpus with
train/rewrite_tasks.py, one fresh draw (seed) per pass, on all CPU cores.

Outputs under --out: run.json (hyper-parameters, data counts, timing), loss.csv, a checkpoint
(weights in the model's own parameter names, bf16, split in two safetensors files so each stays
small) rewritten every --ckpt-every seconds, and at the end eval.json + samples.jsonl from
train/evaluate.py.

Training differences from inference, none of which changes the function computed:
- the routed experts are evaluated densely (every expert on every token, weighted by the
  sparse top-k router weights, so non-selected experts get weight 0) instead of transformers'
  per-expert loop, which syncs the GPU once per expert;
- bf16 autocast; the GDN recurrence runs in fp32 as in transformers.
"""
from __future__ import annotations

import argparse
import gzip
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

import rewrite_tasks  # noqa: E402
from strata import prompts  # noqa: E402

MODEL_CONFIG = dict(
    vocab_size=8192,
    hidden_size=256,
    num_hidden_layers=8,
    full_attention_interval=4,  # layers 3 and 7 are gated attention, the rest Gated DeltaNet
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    partial_rotary_factor=0.25,
    rope_theta=10000.0,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_conv_kernel_dim=4,
    num_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=64,
    shared_expert_intermediate_size=256,
    intermediate_size=256,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    max_position_embeddings=4096,
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
    interval = cfg.pop("full_attention_interval")
    cfg["layer_types"] = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                          for i in range(cfg["num_hidden_layers"])]
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


# ----------------------------------------------------------------------------------- data

def corpus_path(data: Path) -> Path:
    """train.jsonl.xz when present (smaller to carry), else train.jsonl.gz."""
    xz = data / "corpus" / "train.jsonl.xz"
    return xz if xz.exists() else data / "corpus" / "train.jsonl.gz"


def load_corpus(path: Path):
    return list(rewrite_tasks.iter_corpus(path))


def encode_all(tokenizer, texts, batch=2048):
    out = []
    for i in range(0, len(texts), batch):
        out += [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch(texts[i:i + batch])]
    return out


def build_rows(rewrite_ids, code_stream, seq_len, code_row_frac, rng):
    """Rows of seq_len+1 tokens. A rewrite row holds whole rewrite examples from position 0 and
    is filled up from the code stream; after each rewrite row a pure code row (a slice of the
    code stream) follows with probability code_row_frac / (1 - code_row_frac), so about
    code_row_frac of the rows are pure code. Returns (rows [R, seq_len+1] int32, code tokens)."""
    width = seq_len + 1
    rows, code_tokens, pos = [], 0, 0
    p_code = code_row_frac / (1 - code_row_frac)

    def take(n):
        nonlocal pos, code_tokens
        if pos + n > len(code_stream):
            pos = 0
        piece = code_stream[pos:pos + n]
        pos += n
        code_tokens += n
        return piece

    order = list(range(len(rewrite_ids)))
    rng.shuffle(order)
    cur, used = [], 0
    for idx in order:
        ex = rewrite_ids[idx]
        if used + len(ex) > width:
            cur.append(take(width - used))
            rows.append(np.concatenate(cur))
            cur, used = [], 0
            if rng.random() < p_code:
                rows.append(take(width))
        cur.append(ex)
        used += len(ex)
    if cur:
        cur.append(take(width - used))
        rows.append(np.concatenate(cur))
    return np.stack(rows).astype(np.int32), code_tokens


def prepare_data(args, tokenizer, log):
    t0 = time.time()
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    corpus = load_corpus(corpus_path(args.data))
    code_ids = encode_all(tokenizer, [r["text"] for r in corpus])
    code_stream = np.concatenate([np.append(ids, eos) for ids in code_ids]).astype(np.int32)
    log(f"corpus: {len(corpus)} files, {len(code_stream)} tokens ({time.time() - t0:.0f}s)")
    rewrite_ids, kinds = [], {}
    for p in range(args.rewrite_passes):
        t1 = time.time()
        tasks = list(rewrite_tasks.generate(corpus_path(args.data), args.per_snippet,
                                            seed=args.seed * 1000 + p, workers=args.workers))
        texts = [prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"])
                 for t in tasks]
        ids = encode_all(tokenizer, texts)
        kept = 0
        for t, x in zip(tasks, ids):
            if len(x) <= args.seq_len + 1:
                rewrite_ids.append(x)
                kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
                kept += 1
        log(f"rewrite pass {p}: {len(tasks)} tasks, {kept} fit ({time.time() - t1:.0f}s)")
    rng = random.Random(args.seed)
    rows, code_tokens = build_rows(rewrite_ids, code_stream, args.seq_len, args.code_row_frac, rng)
    perm = np.random.default_rng(args.seed).permutation(len(rows))
    rows = rows[perm]
    rewrite_tokens = int(sum(len(x) for x in rewrite_ids))
    stats = {"corpus_files": len(corpus), "corpus_tokens": int(len(code_stream)),
             "rewrite_examples": len(rewrite_ids), "rewrite_tokens": rewrite_tokens,
             "rewrite_kinds": kinds, "rows": int(len(rows)), "row_tokens": int(rows.size),
             "code_tokens_in_rows": int(code_tokens), "prep_seconds": round(time.time() - t0, 1)}
    log(json.dumps(stats))
    return rows, stats


# ------------------------------------------------------------------------------ checkpoint

def save_checkpoint(model, out: Path, tag: str):
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    keys = sorted(sd)
    total = sum(v.numel() * 2 for v in sd.values())
    half, acc, split = total / 2, 0, len(keys)
    for i, k in enumerate(keys):
        acc += sd[k].numel() * 2
        if acc >= half:
            split = i + 1
            break
    for name, part in (("a", keys[:split]), ("b", keys[split:])):
        tmp = out / f"ckpt_{name}.safetensors.tmp"
        save_file({k: sd[k] for k in part}, str(tmp), metadata={"tag": tag})
        os.replace(tmp, out / f"ckpt_{name}.safetensors")


def load_checkpoint(model, folder: Path):
    from safetensors.torch import load_file

    sd = {}
    for name in ("a", "b"):
        sd.update(load_file(str(folder / f"ckpt_{name}.safetensors")))
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"checkpoint mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")


# ----------------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path(".devdata"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=7.0, help="training time budget (schedule follows it)")
    ap.add_argument("--rewrite-passes", type=int, default=3)
    ap.add_argument("--per-snippet", type=int, default=3)
    ap.add_argument("--code-row-frac", type=float, default=0.15)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--ckpt-every", type=float, default=60.0)
    ap.add_argument("--compile", choices=("auto", "yes", "no"), default="no")
    ap.add_argument("--init-from", type=Path, default=None, help="folder with ckpt_a/b, or an exported model folder, to continue from")
    ap.add_argument("--eval", action="store_true", help="run train/evaluate.py at the end")
    ap.add_argument("--eval-per-kind", type=int, default=40)
    ap.add_argument("--eval-headers", type=int, default=200)
    ap.add_argument("--eval-files", type=int, default=400)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="a very small model for a CPU smoke test")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "train_log.txt", "a")

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
    tokenizer = Tokenizer.from_file(str(args.data / "tok" / "tokenizer.json"))
    config = make_config(tokenizer)
    if args.tiny:
        config.hidden_size, config.num_experts, config.moe_intermediate_size = 64, 4, 16
        config.linear_key_head_dim = config.linear_value_head_dim = 8
        config.shared_expert_intermediate_size = 64
    rows, data_stats = prepare_data(args, tokenizer, log)

    patch_experts()
    if args.init_from and (args.init_from / "config.json").exists():
        # continue from an exported Hugging Face folder (e.g. the shipped strata-tiny)
        model = Qwen3NextForCausalLM.from_pretrained(args.init_from, dtype=torch.float32).to(args.device)
        config = model.config
    else:
        model = Qwen3NextForCausalLM(config).to(args.device)
    if args.init_from and not (args.init_from / "config.json").exists():
        load_checkpoint(model, args.init_from)
        log(f"initialised from {args.init_from}")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters: {n_params} ({n_params * 2 / 1e6:.2f} MB in bf16)")
    tap = RouterTap(model)

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name or "A_log" in name or "dt_bias" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=args.device == "cuda")

    run = {"args": {k: str(v) for k, v in vars(args).items()}, "model_config": config.to_dict(),
           "parameters": n_params, "data": data_stats,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    (args.out / "run.json").write_text(json.dumps(run, indent=1))

    layers = model.model.layers
    if args.compile == "yes":
        for i in range(len(layers)):
            layers[i] = torch.compile(layers[i])
        log("compiled decoder layers")

    loss_csv = open(args.out / "loss.csv", "a")
    if loss_csv.tell() == 0:
        loss_csv.write("step,tokens,seconds,lr,loss,aux\n")
    budget = args.minutes * 60
    step, tokens_seen, row_pos = 0, 0, 0
    t_start = time.time()
    last_ckpt = t_start
    ema = None
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    model.train()
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
        if row_pos + args.batch > len(rows):
            row_pos = 0
            rows = rows[np.random.default_rng(args.seed + step).permutation(len(rows))]
        batch = torch.from_numpy(rows[row_pos:row_pos + args.batch]).to(args.device, non_blocking=True).long()
        row_pos += args.batch
        inputs, labels = batch[:, :-1], batch[:, 1:]
        mask = torch.ones_like(labels, dtype=torch.bool)
        with torch.autocast(device_type="cuda" if args.device == "cuda" else "cpu", dtype=torch.bfloat16):
            hidden = model.model(input_ids=inputs).last_hidden_state
            logits = model.lm_head(hidden)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))
        aux = tap.aux_loss(mask)
        total = loss + args.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += labels.numel()
        if step % 10 == 0 or step <= 3:
            lv, av = loss.item(), aux.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            secs = time.time() - t_start
            loss_csv.write(f"{step},{tokens_seen},{secs:.1f},{lr:.6f},{lv:.4f},{av:.4f}\n")
            loss_csv.flush()
            if step % 50 == 0 or step <= 3:
                log(f"step {step} loss {lv:.4f} (ema {ema:.4f}) aux {av:.3f} lr {lr:.2e} "
                    f"{tokens_seen / max(secs, 1e-9):.0f} tok/s {secs:.0f}s")
        if time.time() - last_ckpt > args.ckpt_every:
            save_checkpoint(model, args.out, f"step {step}")
            last_ckpt = time.time()
    train_seconds = time.time() - t_start
    save_checkpoint(model, args.out, f"step {step}")
    run.update(steps=step, tokens_seen=tokens_seen, train_seconds=round(train_seconds, 1))
    (args.out / "run.json").write_text(json.dumps(run, indent=1))
    log(f"done: {step} steps, {tokens_seen} tokens, {train_seconds:.0f}s")
    if args.eval:
        import evaluate

        model.eval()
        for i in range(len(layers)):
            layers[i] = getattr(layers[i], "_orig_mod", layers[i])
        results = evaluate.run_all(model, tokenizer, args.data, args.out, args.device,
                                   per_kind=args.eval_per_kind, n_headers=args.eval_headers,
                                   n_files=args.eval_files, log=log)
        run["eval"] = results
        (args.out / "run.json").write_text(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
