"""The engine's generation: continuous batching of decode rows on a KV slab, sized to the work and
the memory, with greedy or seeded top-p sampling per request (adapters/engine/sampling.py)."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from safetyrepro.adapters.backends.backend import GenRequest, GenResult
from safetyrepro.adapters.engine.engine_head import EXACT_ROW_BLOCK
from safetyrepro.adapters.engine.engine_prefill import _Row
from safetyrepro.adapters.engine.kv_slab import KVSlab
from safetyrepro.adapters.engine.sampling import next_tokens
from safetyrepro.adapters.engine.tokenisation import prefix_token_id
from safetyrepro.errors import UserError

DECODE_ROWS_PER_PROMPT = 8  # decoding with an explicit batch_size: that many prompts, batch_size x this rows
DECODE_MAX_ROWS = 192  # decoding sized to the work: at most this many rows in one step ...
DECODE_KV_MB = 2048  # ... and their key/value states within this many MB (SAFETYREPRO_DECODE_KV_MB)
DECODE_KEY_BLOCK = 16  # a decode step's key width is a multiple of this (see rowwise_attention._decode_forward)
# 2: one attention product for all rows, row blocks padded in fp32, inverse-CDF sampling (1: the first)
DECODE_VERSION = 2


def derive_seed(base: int, *parts: object) -> int:
    """A 63-bit seed from a base seed and any parts (stable across processes and platforms)."""
    h = hashlib.sha256(repr((int(base), *parts)).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") >> 1


def first_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest occurrence of any (non-empty) stop string, or -1."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(found) if found else -1


def check_gen_request(r: GenRequest) -> None:
    if r.max_new_tokens < 0:
        raise UserError(f"max_new_tokens must be >= 0, got {r.max_new_tokens}")
    if r.temperature < 0:
        raise UserError(f"temperature must be >= 0, got {r.temperature}")
    if not 0 < r.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {r.top_p}")


def _prompt_groups(order, prompts, reqs, seeds, max_rows: int, done) -> list[list[int]]:
    """Requests in `order` as runs of identical prompts (e.g. a sampled request's seeds), at most `max_rows` a run;
    a request for no new tokens is answered at once and joins none."""
    groups: list[list[int]] = []
    for i in order:
        if reqs[i].max_new_tokens == 0:
            done(
                i,
                GenResult(
                    text="", n_prompt_tokens=len(prompts[i]), n_new_tokens=0, finish_reason="length", seed=seeds[i]
                ),
            )
        elif groups and prompts[groups[-1][0]] == prompts[i] and len(groups[-1]) < max_rows:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class GenerateMixin:
    """Engine methods for text generation."""

    def generate(
        self, requests: Sequence[GenRequest], batch_size: int | None = None, progress: bool = False
    ) -> list[str]:
        return [r.text for r in self.generate_detailed(requests, batch_size=batch_size, progress=progress)]

    def generate_detailed(
        self, requests: Sequence[GenRequest], batch_size: int | None = None, progress: bool = False
    ) -> list[GenResult]:
        import torch

        for r in requests:
            check_gen_request(r)
        bs = batch_size or self.batch_size
        prompts: list[list[int]] = []
        seeds: list[int | None] = []
        for r in requests:
            ids = self.tok_encode(r.prompt)
            room = self.max_length - r.max_new_tokens
            if room <= 0:
                raise UserError(
                    f"max_new_tokens {r.max_new_tokens} leaves no room for the prompt "
                    f"(model context {self.max_length} tokens)"
                )
            if not ids:
                ids = [prefix_token_id(self.tokenizer)]
            prompts.append(ids[-room:])
            seeds.append(None if r.temperature == 0 else (r.seed if r.seed is not None else secrets.randbits(63)))
        results: list[GenResult | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: (-len(prompts[i]), prompts[i], i))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(requests), desc="generate", unit="req")

        def done(i: int, res: GenResult) -> None:
            results[i] = res
            if bar is not None:
                bar.update(1)

        with self._lock, torch.inference_mode():
            self._generate(order, prompts, list(requests), seeds, bs, done)
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]

    def decode_rows(self, longest: int) -> int:
        """Rows decoded side by side when no batch size is given: as many as the work has, up to
        DECODE_MAX_ROWS (matrix products stop gaining speed well before), and as many as fit
        SAFETYREPRO_DECODE_KV_MB (default DECODE_KV_MB) of key/value states when every row is
        `longest` tokens (prompt + new tokens) long."""
        import torch

        try:
            budget_mb = float(os.environ.get("SAFETYREPRO_DECODE_KV_MB", "") or DECODE_KV_MB)
        except ValueError:
            raise UserError(
                "SAFETYREPRO_DECODE_KV_MB must be a number of megabytes, got "
                f"{os.environ['SAFETYREPRO_DECODE_KV_MB']!r}"
            ) from None
        n_layers, kv_heads, head_dim = self._kv_dims
        per_row = (
            max(1, longest) * n_layers * 2 * kv_heads * head_dim * torch.empty(0, dtype=self._kv_dtype).element_size()
        )
        return max(2, min(DECODE_MAX_ROWS, int(budget_mb * 2**20 // per_row)))

    def _generate(
        self,
        order: list[int],
        prompts: list[list[int]],
        reqs: list[GenRequest],
        seeds: list[int | None],
        batch_size: int | None,
        done,
    ) -> None:
        """Continuous batching. Requests are admitted in `order` by prompt groups (identical prompts,
        e.g. the seeds of a sampled request): whenever fewer than `batch_size` distinct prompts are
        decoding, the next groups are prefilled (chunked, through the prefix store) and join the
        decoding rows, up to `DECODE_ROWS_PER_PROMPT` x batch_size rows; with no batch size, up to
        `decode_rows` rows whatever their prompts (the work and the memory decide). Decoding runs on a
        KVSlab with one row per request, its keys from column 0, every row writing its new token at
        its own column and attending to its own keys, all rows in one attention call per layer
        (rowwise_attention._decode_forward); finished rows stay in it, idle, until half of its rows
        are idle or new rows come in, then it is laid out anew. A lone decoding row always has a
        second (idle) row beside it: no forward pass has a single token row. Without row-wise
        attention, a group is admitted only into an empty slab and only with groups of its prompt
        length (no padding)."""
        import torch

        if batch_size is None:  # sized to the work and the memory (decode_rows)
            max_rows = self.decode_rows(max(len(prompts[i]) + reqs[i].max_new_tokens for i in order) if order else 1)
            batch_size = max_rows
        else:
            max_rows = DECODE_ROWS_PER_PROMPT * batch_size
        pending = deque(_prompt_groups(order, prompts, reqs, seeds, max_rows, done))
        rows: list[_GenRow | None] = []  # slab rows; None: idle
        slab = None
        logits: dict[int, object] = {}  # slab row -> logits of the row's next token
        fed: list[int] = []  # the rows of the last decode step, whose logits are `out`
        out = None
        device = self.model.device
        while pending or any(r is not None for r in rows):
            live = [b for b, r in enumerate(rows) if r is not None]
            n_groups = len({rows[b].group for b in live})
            if pending and n_groups < batch_size and (self._rowwise or not live):
                admit: list[list[int]] = []
                n_rows = len(live)
                while (
                    pending
                    and n_groups + len(admit) < batch_size
                    and (n_rows + len(pending[0]) <= max_rows or not (admit or live))
                ):
                    if not self._rowwise and admit and len(prompts[pending[0][0]]) != len(prompts[admit[0][0]]):
                        break
                    n_rows += len(pending[0])
                    admit.append(pending.popleft())
                if admit:
                    slab, rows, logits = self._admit(admit, prompts, reqs, seeds, slab, rows, logits)
                    fed = []  # rows renumbered: `out` no longer lines up with them
                    live = [b for b, r in enumerate(rows) if r is not None]
            # sample every live row's next token
            active = [rows[b] for b in live]
            batch = out if live == fed else torch.stack([logits[b] for b in live])  # (no copy when unchanged)
            toks = next_tokens(batch, [reqs[r.i] for r in active], [r.gen for r in active])
            feed: dict[int, int] = {}
            for b, r, t in zip(live, active, toks, strict=True):
                r.n_new += 1
                stop = t in self.eos_token_ids
                if not stop:
                    r.generated.append(t)
                    stop = (
                        bool(reqs[r.i].stop)
                        and first_stop(self.tokenizer.decode(r.generated, skip_special_tokens=True), reqs[r.i].stop)
                        >= 0
                    )
                if stop or len(r.generated) >= reqs[r.i].max_new_tokens:
                    done(r.i, self._result(r, prompts, reqs, seeds, "stop" if stop else "length"))
                    rows[b] = None
                else:
                    feed[b] = t
            logits = {}
            if not feed:
                rows, slab = [], None
                continue
            # the rows still decoding are exactly those being fed: lay them out anew when half the slab
            # is idle or it has no column left (a fresh slab has room for every row's next token)
            idle = len(rows) - len(feed)
            longest = max(rows[b].length for b in feed)
            if (
                2 * idle >= len(rows) and len(feed) + (-len(feed) % EXACT_ROW_BLOCK) < len(rows)
            ) or longest + 1 > slab.capacity:
                slab, rows, kept = self._relayout(slab, rows, sorted(feed), [])
                feed = {kept[b]: t for b, t in feed.items()}
            # one decode step for the rows being fed, each writing at its own next column; idle rows get
            # a pad token at column 0 and see only that
            pos, ids = [], []
            for b, r in enumerate(rows):
                if b in feed:
                    r.length += 1
                    pos.append(r.length - 1)
                    ids.append(feed[b])
                else:
                    pos.append(0)
                    ids.append(self.pad_token_id)
            pos_t = torch.tensor(pos, device=device)
            if self._rowwise:
                width = min(slab.capacity, -(-(longest + 1) // DECODE_KEY_BLOCK) * DECODE_KEY_BLOCK)
                cache = KVSlab(slab.buf, 0, cols=pos_t, width=width, layer_major=True).cache
                hidden = self._run(
                    torch.tensor(ids, device=device)[:, None], None, pos_t[:, None], cache, None, key_len=pos_t + 1
                )
            else:  # one prompt length per slab, so every row writes the same column: no padding, no mask
                slab = KVSlab(slab.buf, slab.n, layer_major=True)
                mask = torch.ones(len(rows), slab.n + 1, dtype=torch.long, device=device)
                hidden = self._run(torch.tensor(ids, device=device)[:, None], mask, pos_t[:, None], slab.cache, None)
            fed = sorted(feed)
            out = self._logits(hidden[torch.tensor(fed, device=device), -1], blocked=True)
            logits = {b: out[k] for k, b in enumerate(fed)}

    def _result(self, r: _GenRow, prompts, reqs, seeds, finish: str) -> GenResult:
        text = self.tokenizer.decode(r.generated, skip_special_tokens=True)
        cut = first_stop(text, reqs[r.i].stop)
        if cut >= 0:
            text = text[:cut]
        return GenResult(
            text=text, n_prompt_tokens=len(prompts[r.i]), n_new_tokens=r.n_new, finish_reason=finish, seed=seeds[r.i]
        )

    def _admit(self, admit: list[list[int]], prompts, reqs, seeds, slab, rows, logits):
        """Prefill the admitted groups and add one slab row per request (the slab is laid out anew)."""
        import torch

        if self.prefix_cache:  # one prefill row per distinct prompt
            members = admit
        else:  # the unoptimised path: every request prefills its own prompt
            members = [[i] for g in admit for i in g]
        pre = self._prefill(
            [_Row(prompts[m[0]], len(prompts[m[0]]) - 1, len(prompts[m[0]])) for m in members],
            want_kv=True,
            blocked=True,
        )
        group_of = {}
        for g in admit:
            key = object()
            for i in g:
                group_of[i] = key
        new = []
        for p, m in enumerate(members):
            for i in m:
                g = None
                if seeds[i] is not None:
                    g = torch.Generator(device="cpu")
                    g.manual_seed(int(seeds[i]))
                new.append(
                    (
                        _GenRow(i=i, group=group_of[i], gen=g, length=len(prompts[i]), max_new=reqs[i].max_new_tokens),
                        pre.chunks[p],
                        pre.logits[p][-1],
                    )
                )
        keep = [b for b, r in enumerate(rows) if r is not None]
        slab, rows, kept = self._relayout(slab, rows, keep, [(r, c) for r, c, _ in new])
        logits = {kept[b]: t for b, t in logits.items() if b in kept}
        for k, (_, _, t) in enumerate(new):
            logits[len(keep) + k] = t
        return slab, rows, logits

    def _relayout(self, slab, rows, keep: list[int], new: list):
        """A fresh slab holding the kept rows (then the new ones: (row, prompt chunks)), each from
        column 0 (left-aligned), with room to decode every row to its max_new_tokens (rounded up to
        DECODE_KEY_BLOCK columns), idle rows added to make a multiple of EXACT_ROW_BLOCK.
        Returns (slab, rows, old index -> new index)."""
        import torch

        out_rows: list[_GenRow | None] = [rows[b] for b in keep] + [r for r, _ in new]
        width = max(r.length for r in out_rows)
        capacity = max(r.length + r.room for r in out_rows)
        capacity = -(-capacity // DECODE_KEY_BLOCK) * DECODE_KEY_BLOCK
        out_rows += [None] * (-len(out_rows) % EXACT_ROW_BLOCK)  # idle rows: every step a full block
        n_layers, kv_heads, head_dim = self._kv_dims
        # zeros: the masked columns of a decode step are read (as exact zeros, never NaN garbage)
        buf = torch.zeros(
            n_layers, 2, len(out_rows), kv_heads, capacity, head_dim, dtype=self._kv_dtype, device=self.model.device
        )
        for b, old in enumerate(keep):
            n = rows[old].length
            buf[:, :, b, :, :n] = slab.buf[:, :, old, :, :n]
        for k, (_r, chunks) in enumerate(new):
            at = 0
            for t in chunks:  # [layers, 2, kv_heads, n, head_dim]
                buf[:, :, len(keep) + k, :, at : at + t.shape[3]] = t
                at += t.shape[3]
        return KVSlab(buf, width, layer_major=True), out_rows, {old: b for b, old in enumerate(keep)}


@dataclass(eq=False)
class _GenRow:
    """A decoding request: its index, prompt group, sampling generator, and state."""

    i: int
    group: object
    gen: object
    length: int  # tokens in its cache row (prompt + tokens fed back)
    generated: list = field(default_factory=list)
    n_new: int = 0
    max_new: int = 0

    @property
    def room(self) -> int:
        return max(1, self.max_new - len(self.generated))
