"""Type stubs of strata._engine (the C++ extension). Each area keeps its own section."""
from __future__ import annotations

# ---- model (engine core: engine_ext/register_model.cpp) ------------------------------------
from typing import Any, Sequence

import numpy as np

class ExpertStore:
    """Base of every expert store (resident, streaming). Created only by strata._engine."""

class WindowModel:
    """The C++ window/commit contract (engine_ext/window_model.h); the decode loop drives it."""

class Engine(WindowModel):
    def __init__(
        self,
        spec: dict[str, Any],
        tensors: list[tuple[str, str, int, str, list[int]]],
        expert_store: ExpertStore | None = None,
        threads: int = 0,
        fold: str = "eager",
        ctx: int = 0,
        model_id: str = "",
        config_json: str = "{}",
        backend: str = "cpu",
    ) -> None: ...
    def run(self, tokens: Sequence[int] | np.ndarray, last_only: bool = False,
            out: np.ndarray | None = None) -> np.ndarray:
        """(T, vocab) float32 next-token logits for each row ((1, vocab) with last_only); with
        `out` (float32, C-contiguous, writable, that shape) written into it and returned."""
    def commit(self, keep: int) -> None: ...
    def reset(self) -> None: ...
    @property
    def pos(self) -> int: ...
    @property
    def context_limit(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def model_id(self) -> str: ...
    @property
    def window_open(self) -> bool: ...
    @property
    def threads(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def fold(self) -> str: ...
    @property
    def expert_store(self) -> ExpertStore: ...
    @property
    def config(self) -> dict[str, Any]: ...
    def save_state(self) -> bytes: ...
    def load_state(self, blob: bytes) -> None: ...
    def last_telemetry(self) -> dict[str, Any]: ...
    def backend_counters(self) -> dict[str, float]:
        """What the backend counts since the engine was made (webgpu: submits, dispatches)."""
    def as_window_model(self) -> WindowModel: ...
    # added to the class by engine_ext/register_stream.cpp (cache-aware routing, MoCE)
    def set_routing(self, cache_aware: bool = False, protect: int = 0, bonus: float = 0.0,
                    draft_protect: int = -1, draft_bonus: float = ..., hard_budget: bool = False,
                    budget_anchors: int = -1, root_only_readahead: bool = False) -> None:
        """Any active mode except root_only_readahead changes the model: windows are then marked approximate."""
    def routing(self) -> dict[str, Any]:
        """The routing options plus "approximate"."""

# ---- decode (drafters, sampler, decode loop: engine_ext/register_decode.cpp) ---------------

class FakeLM(WindowModel):
    """Deterministic stand-in model for tests: row logits depend on the last `order` tokens (sharp),
    a copy bias toward what followed their last earlier occurrence, and the whole history (weak)."""
    def __init__(self, vocab: int, seed: int = 0, context_limit: int = 4096, order: int = 3,
                 sharp: float = 8.0, history_weight: float = 1.0, cost_us_base: float = 0.0,
                 cost_us_per_row: float = 0.0, copy_bias: float = 0.0) -> None: ...
    def run(self, tokens: Sequence[int]) -> np.ndarray: ...
    def commit(self, keep: int) -> None: ...
    def reset(self) -> None: ...
    def save_state(self) -> bytes: ...
    def load_state(self, blob: bytes) -> None: ...
    def last_telemetry(self) -> dict[str, Any]: ...
    @property
    def pos(self) -> int: ...
    @property
    def context_limit(self) -> int: ...
    @property
    def vocab(self) -> int: ...
    @property
    def window_open(self) -> bool: ...
    @property
    def committed(self) -> list[int]: ...
    @property
    def runs(self) -> int: ...
    @property
    def rows(self) -> int: ...

class Drafter:
    def append(self, tokens: Sequence[int]) -> None: ...
    def add_document(self, tokens: Sequence[int]) -> None: ...
    def propose(self, max_tokens: int, min_match: int = 4) -> tuple[list[int], int]:
        """(draft tokens, match length); empty when no match of min_match tokens."""
    def reset(self) -> None: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def kind(self) -> str: ...

class BaselineDrafter(Drafter):
    def __init__(self, cap: int = 3) -> None: ...
    @property
    def cap(self) -> int: ...

class SuffixDrafter(Drafter):
    max_order: int
    def __init__(self) -> None: ...
    @property
    def n_contexts(self) -> int: ...

LIMITS: dict[str, int]
"""What the engine accepts: max_draft, max_window, max_new, max_top_k, max_min_match, max_seed,
max_token_id, max_context, max_threads (strata.settings validates against these)."""

def counter_uniform(seed: int, position: int, token: int) -> float: ...
def gumbel_noise(seed: int, position: int, token: int) -> float: ...

class Sampler:
    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, seed: int = 0, copy_bias: float = 0.0) -> None: ...
    def accept(self, token: int) -> None: ...
    def sample(self, logits: np.ndarray, position: int, pending: Sequence[int] | None = None,
               copy: int = -1) -> int: ...

class CopyIndex:
    """The copy bias's predictor over a fixed source (a suffix automaton)."""
    def __init__(self, source: Sequence[int]) -> None: ...
    def predict(self, context: Sequence[int]) -> tuple[int, int]: ...
    def predictions(self, context: Sequence[int], start: int = 0) -> list[int]: ...

class Decoder:
    """draft -> run -> verify -> commit over a WindowModel. Settings (keyword arguments of
    generate/start): max_new, temperature, top_k, top_p, repetition_penalty, presence_penalty,
    frequency_penalty, seed, drafter ('none'|'baseline'|'suffix'), max_draft (None = adaptive),
    min_match, stop_ids, forced (benchmark oracle: force the outputs), copy_bias, copy_skip (tokens
    the copy bias never boosts)."""
    def __init__(self, model: WindowModel) -> None: ...
    def generate(self, prompt: Sequence[int], *, callback: Any = None, **settings: Any) -> dict[str, Any]:
        """-> {tokens, stop_reason, prefill_us, n_prefill}; callback(tokens, stats) after each
        window (returning False stops); the GIL is released in between."""
    def start(self, prompt: Sequence[int], **settings: Any) -> tuple[list[int], dict[str, Any]]:
        """Prefill and emit the first token (stats with T = 0)."""
    def step(self) -> tuple[list[int], dict[str, Any]]:
        """Run one window."""
    def stop(self, reason: str = "stopped") -> None: ...
    @property
    def active(self) -> bool: ...
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def prefill_us(self) -> float: ...
    @property
    def history(self) -> list[int]: ...
    @property
    def pending(self) -> list[int]: ...
    @property
    def pos(self) -> int: ...
    def set_state(self, history: Sequence[int], pending: Sequence[int]) -> None: ...
    def add_document(self, tokens: Sequence[int]) -> None: ...
    @property
    def documents(self) -> list[list[int]]: ...
    def peek_draft(self, drafter: str, max_tokens: int, min_match: int = 4) -> tuple[list[int], int]: ...
    def reset(self) -> None: ...
    def controller_state(self) -> dict[str, Any]: ...
    def reset_controller(self) -> None: ...

# ---- stream (expert pack reader, cache, IO, MoCE routing: engine_ext/register_stream.cpp) ------
# (Engine.set_routing / Engine.routing come from register_stream.cpp too: stubbed on Engine.)

def crc32(data: bytes | bytearray | memoryview | np.ndarray, crc: int = 0) -> int:
    """CRC-32 with the zlib polynomial (same values as zlib.crc32)."""

def raw_read(path: str, offsets: list[int], block: int, threads: int = 4, direct: bool = True) -> tuple[int, float]:
    """Benchmark baseline: (bytes, seconds) reading `block` bytes at each offset; no cache, no CRC."""

def route_window(
    logits: np.ndarray,
    k: int,
    renormalize: bool = True,
    ready: np.ndarray | None = None,
    cache_aware: bool = False,
    protect: int = 0,
    bonus: float = 0.0,
    draft_protect: int = -1,
    draft_bonus: float = ...,
    hard_budget: bool = False,
    budget_anchors: int = -1,
) -> tuple[np.ndarray, np.ndarray]:
    """Routes [rows, experts] router logits (row 0 = root): (idx int32 [rows, k], weights f32 [rows, k])."""

class StreamingExpertStore(ExpertStore):
    """Resident expert slots filled from a pack's experts.bin by IO worker threads."""
    def __init__(
        self,
        path: str,
        data_offset: int,
        stride: int,
        blob_bytes: int,
        num_experts: int,
        hidden: int,
        inter: int,
        dtype: str,
        layers: list[int],
        crcs: np.ndarray,
        cache_bytes: int,
        io_mode: str = "direct",
        eviction: str = "lru",
        io_threads: int = 4,
        readahead: bool = False,
        lfu_half_life: float = 32.0,
        prefault: bool = False,
    ) -> None: ...
    def acquire(self, layer: int, experts: list[int], root_experts: list[int] = ...) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Pins the experts and returns copies of (gate, up, down); bf16 comes back as uint16 bits."""
    def acquire_release(self, layer: int, experts: list[int], root_experts: list[int] = ...) -> None: ...
    def release(self, layer: int) -> None: ...
    def prefetch(self, layer: int, experts: list[int]) -> None: ...
    def is_ready(self, layer: int, expert: int) -> bool: ...
    def resident(self, layer: int) -> list[int]: ...
    def drain_telemetry(self) -> dict[str, Any]: ...
    def inject_read_error(self, layer: int, expert: int, times: int = 1) -> None:
        """Test hook: the next `times` reads of (layer, expert) fail with EIO (0 clears)."""
    def stress(self, threads: int, iterations: int, max_union: int, seed: int = 0) -> int:
        """Threads acquire random unions and verify pinned blobs' CRCs; returns corrupted views seen."""
    readahead: bool
    @property
    def slots(self) -> int: ...
    @property
    def slots_used(self) -> int: ...
    @property
    def overflow_high_water(self) -> int: ...
    @property
    def io_mode(self) -> str:
        """"direct", "buffered+dontneed" (O_DIRECT refused by the file system) or "page_cache"."""
    @property
    def stride(self) -> int: ...

class LengthController:
    """The adaptive draft-length controller of the decode loop, standalone (tests, tools)."""
    def __init__(self) -> None: ...
    def choose(self, match_len: int, available: int) -> int: ...
    def observe_drafts(self, match_len: int, observed: int, accepted: int) -> None: ...
    def observe_cost(self, T: int, us: float) -> None: ...
    def observe_window(self, T: int, keep: int) -> None:
        """A window of T rows kept `keep`: charges (or credits) the loss budget."""
    def begin_generation(self) -> None: ...
    def draft_cap(self, available: int) -> int: ...
    @property
    def budget_us(self) -> float:
        """What drafting may still lose in this generation (microseconds)."""
    def acceptance(self, bucket: int, position: int) -> float: ...
    def cost(self, T: int) -> float: ...
    def expected_keep(self, match_len: int, drafts: int) -> float: ...
    @staticmethod
    def bucket(match_len: int) -> int: ...
    def reset(self) -> None: ...

# ---- quant (GGUF block formats on the CPU kernels: engine_ext/register_quant.cpp) -----------

def quant_set_activations(mode: str) -> None:
    """Engine matmuls over block formats: "int8" activations (default) or "f32" (exact)."""
def quant_activations() -> str: ...
def quant_activation_block(fmt: str) -> int:
    """Values per int8 activation block the engine's matmul over `fmt` uses (0: f32 input)."""
def quant_formats() -> dict[str, tuple[int, int, int]]:
    """name -> (ggml type id, weights per block, bytes per block)."""
def quant_quantize_activation(
    x: np.ndarray, block: int, sums: bool = False
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q int8, d float32[, s float32]): one activation row quantized per block of 32 or 256 as the
    dot kernels do; sums=True (32-blocks) adds each block's Q8_1 sum, as Q5_1's min term uses it."""
def quant_activation_sums(fmt: str) -> bool:
    """Whether the engine's matmul over `fmt` also uses each activation block's Q8_1 sum (Q5_1's min term)."""
def quant_isas() -> list[str]:
    """Instruction sets of the dot kernels in this build, narrowest first."""
def quant_dequantize(fmt: str, data: bytes | bytearray | memoryview | np.ndarray, rows: int, cols: int) -> np.ndarray:
    """rows x cols float32 weights from a tensor's raw bytes in a GGUF block format."""
def quant_dot(fmt: str, data: bytes | bytearray | memoryview | np.ndarray, rows: int, cols: int, x: np.ndarray,
              isa: str = "auto") -> np.ndarray:
    """Y[t, r] = dot(x[t], W[r]) with the multi-row kernel (T = 1..16)."""

# ---- kernels (standalone CPU prefill kernels: engine_ext/register_kernels.cpp) --------------

class _Kernels:
    """strata._engine.kernels: the CPU prefill kernels on numpy arrays (tests and benchmarks)."""
    isa: str
    def gemm(self, X: np.ndarray, W: np.ndarray, bias: np.ndarray | None = None, n0: int = 0,
             n1: int = -1) -> np.ndarray:
        """Y = X @ W.T (+ bias) for output features [n0, n1); W float32 or bf16 bits (uint16)."""
    def attention_causal(self, Q: np.ndarray, K: np.ndarray, V: np.ndarray, pos0: int, n_heads: int,
                         n_kv_heads: int, scale: float) -> np.ndarray: ...
    def gemm_feature_block(self) -> int: ...

kernels: _Kernels

# ---- ops (single backend ops on numpy arrays: engine_ext/register_ops.cpp) -----------------

class _Ops:
    """strata._engine.ops: run one op of a named backend (the per-op consistency test)."""
    def backends(self) -> list[str]: ...
    def op_names(self) -> list[str]: ...
    def formats(self) -> list[tuple[str, int, int, bool]]:
        """(name, elements per block, bytes per block, quantized) of every weight format."""
    def op_has_format(self, op: str) -> bool: ...
    def supports(self, backend: str, op: str, format: str = "F32") -> bool: ...
    def embed(self, backend: str, w: np.ndarray, format: str, rows: int, cols: int, ids: np.ndarray,
              threads: int = 1) -> np.ndarray: ...
    def matmul(self, backend: str, x: np.ndarray, w: np.ndarray, format: str, rows: int, cols: int,
               bias: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
        """(T, rows) = x (T, cols) times the stored matrix `w` (its raw bytes in `format`)."""
    def rmsnorm(self, backend: str, x: np.ndarray, w: np.ndarray, eps: float, threads: int = 1) -> np.ndarray: ...
    def gated_rmsnorm(self, backend: str, x: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float,
                      threads: int = 1) -> np.ndarray: ...
    def rotary(self, backend: str, x: np.ndarray, p0: int, inv_freq: np.ndarray, threads: int = 1) -> np.ndarray: ...
    def attention(self, backend: str, q: np.ndarray, k_cells: np.ndarray, v_cells: np.ndarray, p0: int,
                  scale: float, gate: np.ndarray | None = None, threads: int = 1) -> np.ndarray: ...
    def causal_conv(self, backend: str, x: np.ndarray, hist: np.ndarray, w: np.ndarray,
                    threads: int = 1) -> np.ndarray: ...
    def gdn_inputs(self, backend: str, conv: np.ndarray, b: np.ndarray, a: np.ndarray, A: np.ndarray,
                   dt_bias: np.ndarray, n_k: int, d_k: int, d_v: int, threads: int = 1
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(q, k, v, decay, beta)"""
    def gdn_step(self, backend: str, S0: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                 decay: np.ndarray, beta: np.ndarray, n_k: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(final state, outputs)"""
    def router_topk(self, backend: str, logits: np.ndarray, k: int, renormalize: bool,
                    threads: int = 1) -> tuple[np.ndarray, np.ndarray]: ...
    def gather(self, backend: str, src: np.ndarray, idx: np.ndarray, threads: int = 1) -> np.ndarray: ...
    def swiglu(self, backend: str, g: np.ndarray, u: np.ndarray, threads: int = 1) -> np.ndarray: ...
    def moe_combine(self, backend: str, D: np.ndarray, slot: np.ndarray, w: np.ndarray,
                    shared: np.ndarray | None = None, shared_gate: np.ndarray | None = None,
                    threads: int = 1) -> np.ndarray: ...
    def add(self, backend: str, x: np.ndarray, y: np.ndarray, threads: int = 1) -> np.ndarray: ...
    def copy(self, backend: str, src: np.ndarray, heads: int = 1, threads: int = 1) -> np.ndarray:
        """src (rows, heads * dim) copied through the backend's strided copy (a head stride of 2*dim)."""
    def add_rmsnorm(self, backend: str, x: np.ndarray, y: np.ndarray, w: np.ndarray, eps: float = 1e-6,
                    attached: bool = False, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(x + y, rmsnorm(x + y)) through Backend::add_rmsnorm; attached: the arrays attached to the
        backend for the call (its device-resident path)."""
    def swiglu_matmul(self, backend: str, g: np.ndarray, u: np.ndarray, w: np.ndarray, format: str, rows: int,
                      attached: bool = False, threads: int = 1) -> np.ndarray:
        """(silu(g) * u) W^T through Backend::swiglu_matmul; g and u (T, n), W (rows, n) in `format`."""
    def rmsnorm_rotary(self, backend: str, x: np.ndarray, w: np.ndarray, eps: float, p0: int,
                       inv_freq: np.ndarray, attached: bool = False, threads: int = 1) -> np.ndarray:
        """x (rows, heads, dim) normed per head with w (dim), then rotated at positions p0.. (Backend::rmsnorm_rotary)."""
    def gdn_inputs_step(self, backend: str, conv: np.ndarray, b: np.ndarray, a: np.ndarray, A: np.ndarray,
                        dt_bias: np.ndarray, S0: np.ndarray, n_k: int, in_place: bool = False,
                        attached: bool = False, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(S, out): gdn_inputs then gdn_step through Backend::gdn_inputs_step (the step inputs scratch);
        in_place: S0 and S one array."""
    def conv_gdn_inputs_step(self, backend: str, x: np.ndarray, hist: np.ndarray, w: np.ndarray, b: np.ndarray,
                             a: np.ndarray, A: np.ndarray, dt_bias: np.ndarray, S0: np.ndarray, n_k: int,
                             in_place: bool = False, attached: bool = False,
                             threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(S, out): causal_conv, gdn_inputs, gdn_step through Backend::conv_gdn_inputs_step (the conv
        output and step inputs scratch); x (n, C), hist (K-1, C), w (C, K); in_place: S0 and S one array."""
    def moe_combine_add_rmsnorm(self, backend: str, D: np.ndarray, slot: np.ndarray, w: np.ndarray,
                                shared: np.ndarray | None, shared_gate: np.ndarray | None, x: np.ndarray,
                                norm_w: np.ndarray, eps: float = 1e-6, attached: bool = False,
                                threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(x + moe_combine(...), rmsnorm of that) through Backend::moe_combine_add_rmsnorm."""
    def copy_many(self, backend: str, src: np.ndarray, dst_size: int, jobs: np.ndarray, attached: bool = False,
                  threads: int = 1) -> np.ndarray:
        """Backend::copy_many over a flat src into a flat dst of dst_size floats (starting as -1); jobs
        (n, 9) int32 rows of (rows, heads, dim, src_off, src_ld, src_hs, dst_off, dst_ld, dst_hs)."""

ops: _Ops

# ---- webgpu (engine_ext/webgpu/register_webgpu.cpp; absent when built with STRATA_WEBGPU=OFF) ---

class _WebGpuDevice:
    """One WebGPU device on wgpu-native; each method runs one kernel family in one submit."""
    def __init__(self, library: str, shaders: str, adapter: str = "auto", max_chunk_bytes: int = 0) -> None: ...
    def info(self) -> dict[str, Any]: ...
    def matmul(self, x: np.ndarray, weights: np.ndarray, format: str) -> tuple[np.ndarray, int]: ...
    def rmsnorm(self, x: np.ndarray, weight: np.ndarray, eps: float, weight_offset: float = 0.0,
                z: np.ndarray | None = None) -> np.ndarray: ...
    def rotary(self, x: np.ndarray, cos_sin: np.ndarray, rot_dim: int) -> np.ndarray: ...
    def embedding(self, ids: np.ndarray, table: np.ndarray, format: str, cols: int) -> tuple[np.ndarray, int]: ...
    def elementwise(self, op: str, a: np.ndarray, b: np.ndarray | None = None, s: float = 0.0) -> np.ndarray: ...
    def router_topk(self, logits: np.ndarray, k: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]: ...
    def attention(self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, k_new: np.ndarray,
                  v_new: np.ndarray, pos0: int, scale: float) -> tuple[np.ndarray, np.ndarray]: ...
    def gdn(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray,
            commit_rows: int, scale: float) -> tuple[np.ndarray, np.ndarray]: ...
    def causal_conv(self, x: np.ndarray, w: np.ndarray, hist: np.ndarray,
                    commit_rows: int) -> tuple[np.ndarray, np.ndarray]: ...
    def bench_matmul(self, weights: np.ndarray, format: str, rows: int, iters: int) -> float: ...
    def bench_dispatch(self, n: int, iters: int, mode: str) -> float: ...

class _WebGpu:
    Device: type[_WebGpuDevice]
    WORKGROUP_SIZE: int
    def preprocess_wgsl(self, source: str, defines: dict[str, str], dialect: str = "naga",
                        includes: dict[str, str] | None = None) -> str: ...
    def library_version(self, library: str) -> str: ...

webgpu: _WebGpu
