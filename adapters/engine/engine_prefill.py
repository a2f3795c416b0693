"""The engine's chunked prefill: the canonical computation of prompt key/value states and of the
logits at wanted positions, with prefix reuse through the prefix store (adapters/engine/engine.py says the
rules; adapters/engine/kv_slab.py holds the states)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from safetyrepro.adapters.engine.engine_head import EXACT_ROW_BLOCK
from safetyrepro.adapters.engine.kv_slab import KVSlab
from safetyrepro.adapters.engine.prefix_cache import chunk_keys
from safetyrepro.compat.transformers import base_cache_keyword, final_logit_softcap, text_config


class PrefillMixin:
    """Engine methods for the model's forward passes over prompt chunks."""

    def _kv_layout(self) -> None:
        """Base model, LM head and softcap, and the keyword the cache goes under (renamed in 5.x)."""
        self._base = self.model.base_model
        self._head = self.model.get_output_embeddings()
        text = text_config(self.model)
        self._softcap = final_logit_softcap(self.model)
        self._base_cache_kw = base_cache_keyword(self._base)
        heads = text.num_attention_heads
        self._kv_dims = (
            text.num_hidden_layers,
            getattr(text, "num_key_value_heads", None) or heads,
            getattr(text, "head_dim", None) or text.hidden_size // heads,
        )
        self._kv_dtype = self.model.get_input_embeddings().weight.dtype

    def _run(self, ids, attention_mask, position_ids, cache, spans, key_len=None):
        """One forward of the base model: last hidden states [batch, T, hidden]. Every row's span (a
        prefill), or every row's key count (`key_len`, a decode step), is given to the row-wise
        attention (see rowwise_attention); the caller keeps single-token forwards at two rows or more
        (CPU bf16 GEMV and GEMM differ in the last bit)."""
        kwargs = {self._base_cache_kw: cache, "attention_mask": attention_mask, "position_ids": position_ids}
        if self._rowwise:
            kwargs.update(sr_spans=spans, sr_key_len=key_len, sr_mask_memo={})
        return self._base(input_ids=ids, use_cache=True, **kwargs).last_hidden_state

    def _prefill(
        self, rows: Sequence[_Row], want_kv: bool = False, exact: bool = False, blocked: bool = False
    ) -> _Prefilled:
        """Chunked prefill of token rows: the logits at each row's wanted positions and (want_kv) the
        key/value states of each row's chunks.

        The canonical computation: row r is cut into chunks of C = `chunk_size` tokens at absolute
        positions (the last one partial), and chunk j's queries attend, in one SDPA call of their
        own, to the keys of positions 0 .. end of chunk j. Everything else in the network is
        token-wise, so the chunks of any number of rows are packed into one sequence per forward
        pass (no padding); each chunk writes its keys/values into its row of a KVSlab and reads its
        keys from there (see rowwise_attention and kv_slab). A chunk's states thus depend on the
        tokens up to its end only, and are computed the same way whatever the batch. `exact`: the
        wanted logits come from the float32 head (`_logits`).

        With `prefix_cache` on, a chunk is identified by the whole prefix up to its end: rows sharing
        it compute it once (the other rows copy its states before their later chunks run, one
        forward pass later), and full chunks before the chunk holding a row's first wanted position
        are taken from the prefix store when there (`prefix_cache.PrefixStore`). Off, every row
        computes every chunk itself. The numbers are the same either way."""
        import torch

        C = self.chunk_size
        share = self.prefix_cache
        store = self.prefix_store
        R = len(rows)
        lens = [len(row.tokens) for row in rows]
        n_chunks = [-(-n // C) for n in lens]
        node_of: list[list] = []  # per row, per chunk: the chunk's identity
        for r, row in enumerate(rows):
            if share:
                ids: list = list(chunk_keys(row.tokens, C))
                if len(ids) < n_chunks[r]:
                    ids.append((ids[-1] if ids else b"", tuple(row.tokens[len(ids) * C :])))
            else:
                ids = [(r, j) for j in range(n_chunks[r])]
            node_of.append(ids)
        stored: dict = {}  # chunk identity -> states from the store
        first = [0] * R  # each row's first chunk not taken from the store
        if share:
            for r, row in enumerate(rows):
                keys = node_of[r][: row.need_from // C]
                found = store.longest_prefix(keys) if keys else []
                stored.update(zip(keys, found))
                first[r] = len(found)
        # items: the chunks computed here, each by the first row that needs it computed
        owner: dict = {}  # identity -> (row, j)
        wanted: dict = {}  # identity -> offsets whose logits some row wants
        for r, row in enumerate(rows):
            for j in range(first[r], n_chunks[r]):
                node = node_of[r][j]
                owner.setdefault(node, (r, j))
                lo, hi = max(j * C, row.need_from), min(lens[r], (j + 1) * C)
                if hi > lo:
                    wanted.setdefault(node, set()).update(range(lo - j * C, hi - j * C))
        # an item runs in the pass after every item of another row that it needs (0: none)
        rnd: dict = {}
        for node, (r, j) in owner.items():
            t = 0
            for i in range(j):
                src = owner.get(node_of[r][i])
                if src is not None:
                    t = max(t, rnd[node_of[r][i]] + (src[0] != r))
            rnd[node] = t
        slab_row = {r: k for k, r in enumerate(sorted({r for r, _ in owner.values()}))}
        buf = None
        if owner:
            n_layers, kv_heads, head_dim = self._kv_dims
            cap = max(lens[r] for r in slab_row)
            buf = torch.empty(
                len(slab_row), n_layers, 2, kv_heads, cap, head_dim, dtype=self._kv_dtype, device=self.model.device
            )

        def states(r: int, j: int):
            node = node_of[r][j]
            src = owner.get(node)
            if src is None:
                return stored[node]
            r2, _ = src
            return buf[slab_row[r2], :, :, :, j * C : min(lens[r2], (j + 1) * C)]

        wanted_logits: dict = {}  # (identity, offset) -> logits [V]
        copied: set = set()  # (row, j) whose states are in the row's slab line
        passes = sorted(set(rnd.values()))
        for t in passes:
            items = [(node, rj) for node, rj in owner.items() if rnd[node] == t]
            for _, (r, j) in items:  # the states each item reads that other rows made, into its line
                for i in range(j):
                    if (r, i) not in copied and owner.get(node_of[r][i], (None,))[0] != r:
                        buf[slab_row[r], :, :, :, i * C : (i + 1) * C] = states(r, i)
                        copied.add((r, i))
            groups = [items] if self._rowwise else [[it] for it in items]
            for group in groups:
                self._prefill_pass(group, rows, lens, buf, slab_row, wanted, wanted_logits, exact, blocked)
        if share:
            puts = []
            for node, (r, j) in owner.items():
                if isinstance(node, bytes) and (j + 1) * C <= max(
                    rows[q].store_upto for q in range(R) if j < n_chunks[q] and node_of[q][j] == node
                ):
                    puts.append((j, node, states(r, j).clone()))
            store.put_prefix([(node, v) for _, node, v in sorted(puts, key=lambda p: p[0])])
        logits = [
            torch.stack([wanted_logits[(node_of[r][p // C], p % C)] for p in range(row.need_from, lens[r])])
            for r, row in enumerate(rows)
        ]
        chunks = [[states(r, j) for j in range(n_chunks[r])] for r in range(R)] if want_kv else None
        return _Prefilled(logits, chunks)

    def _prefill_pass(
        self,
        items: list,
        rows: Sequence[_Row],
        lens: list[int],
        buf,
        slab_row: dict,
        wanted: dict,
        wanted_logits: dict,
        exact: bool = False,
        blocked: bool = False,
    ) -> None:
        """One forward over `items` ((identity, (row, j)): chunk j of a row), packed into one sequence
        (row-wise attention) or, without it, one chunk alone on a one-row cache."""
        import torch

        C, device = self.chunk_size, self.model.device
        toks: list[int] = []
        pos: list[int] = []
        spans, writes, sel_t, sel_key = [], [], [], []
        for node, (r, j) in items:
            lo, hi = j * C, min(lens[r], (j + 1) * C)
            off = len(toks)
            toks += rows[r].tokens[lo:hi]
            pos += range(lo, hi)
            spans.append((0, off, off + hi - lo, slab_row[r], 0, hi))
            writes.append((slab_row[r], lo, off, off + hi - lo))
            for o in sorted(wanted.get(node, ())):
                sel_t.append(off + o)
                sel_key.append((node, o))
        if self._rowwise:
            # never a one-token forward (see _run): an idle second token; `blocked` (the prompts of a
            # generation) pads to a multiple of EXACT_ROW_BLOCK tokens, so that float32 products
            # compute every token in a full block of rows whatever else the pass holds
            pad = -len(toks) % EXACT_ROW_BLOCK if blocked else int(len(toks) == 1)
            toks += [self.pad_token_id] * pad
            pos += [0] * pad
            hidden = self._run(
                torch.tensor([toks], device=device),
                None,
                torch.tensor([pos], device=device),
                KVSlab(buf, 0, writes).cache,
                spans,
            )
        else:
            ((_, (r, j)),) = items
            line = buf[slab_row[r] : slab_row[r] + 1]
            hidden = self._run(
                torch.tensor([toks], device=device),
                None,
                torch.tensor([pos], device=device),
                KVSlab(line, j * C).cache,
                None,
            )
        if sel_key:
            logits = self._logits(hidden[0, torch.tensor(sel_t, device=device)], exact=exact, blocked=blocked)
            for k, key in enumerate(sel_key):
                wanted_logits[key] = logits[k]


@dataclass
class _Row:
    """A prefill row: logits are wanted at positions need_from..len(tokens)-1; its full chunks
    ending at or before position store_upto go into the prefix store."""

    tokens: list[int]
    need_from: int
    store_upto: int


@dataclass
class _Prefilled:
    logits: list  # per row: [len(tokens) - need_from, vocab], the model's dtype (float32 when exact)
    chunks: list | None  # per row: each chunk's states [layers, 2, kv_heads, n, head_dim]
