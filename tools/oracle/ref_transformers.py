"""Reference decoders in plain torch that follow Hugging Face transformers' eager code paths.

Written for this project from a reading of transformers' modeling files (which versions: see
tools/oracle/README.md, "Reference transformers"); no code was copied.  What matters here is
that the *sequence of torch ops*, their dtypes, which results are views and which are copies,
and the module tree names are the same as in Hugging Face, because the memory PyTorch uses
follows from exactly those.  The op-by-op description in the README is the contract the
TypeScript side mirrors; change both together.

Two families:

* ``llama`` / ``qwen2`` (``config["model_type"]``): LlamaForCausalLM / Qwen2ForCausalLM with
  eager attention, ``attention_mask=None``, ``use_cache=False``, rotary position embeddings
  computed once per forward at ``model.rotary_emb``, the causal mask built the way
  ``masking_utils.create_causal_mask`` builds it for eager attention, and the loss of
  ``loss_utils.ForCausalLMLoss``.
* ``gpt2``: GPT2LMHeadModel with eager attention (bool ``bias`` buffer + ``torch.where``),
  HF ``Conv1D`` (``addmm`` on a 2-D view), NewGELU written as its Python formula, lm_head tied
  to wte, loss on ``lm_logits[..., :-1, :].contiguous()``.

Every constructor takes ``device`` so parameter counts can be taken on the meta device.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100


def _phase_loss():
    """Marks the loss inside forward for traces (a no-op outside the profiler)."""
    return _LOSS_MARK()


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# The oracle swaps this for a marker that costs no allocation; by default nothing happens.
_LOSS_MARK = _NullCtx


# --------------------------------------------------------------------------------------------
# Llama / Qwen2
# --------------------------------------------------------------------------------------------


def llama_defaults(config: dict) -> dict:
    c = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": 2048,
        "hidden_act": "silu",
        "pad_token_id": None,
        "head_dim": None,
    }
    c.update(config)
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    if c["head_dim"] is None:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    if c["model_type"] not in ("llama", "qwen2"):
        raise ValueError(f"model_type: expected llama|qwen2, received {c['model_type']!r}")
    if c["hidden_act"] != "silu":
        raise ValueError("only hidden_act='silu' is mirrored")
    return c


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)  # no-op for fp32 (same tensor)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        dim = config["head_dim"]
        base = float(config["rope_theta"])
        # default rope: 1 / base^(arange(0, dim, 2) / dim), attention_scaling 1.0
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask

    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        h, i = config["hidden_size"], config["intermediate_size"]
        bias = config["mlp_bias"] if config["model_type"] == "llama" else False
        self.gate_proj = nn.Linear(h, i, bias=bias, device=device)
        self.up_proj = nn.Linear(h, i, bias=bias, device=device)
        self.down_proj = nn.Linear(i, h, bias=bias, device=device)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    def __init__(self, config: dict, layer_idx: int, device=None):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config["head_dim"]
        self.num_key_value_groups = config["num_attention_heads"] // config["num_key_value_heads"]
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config["attention_dropout"]
        h = config["hidden_size"]
        nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]
        if config["model_type"] == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias = o_bias = bool(config["attention_bias"])
        self.q_proj = nn.Linear(h, nh * self.head_dim, bias=qkv_bias, device=device)
        self.k_proj = nn.Linear(h, nkv * self.head_dim, bias=qkv_bias, device=device)
        self.v_proj = nn.Linear(h, nkv * self.head_dim, bias=qkv_bias, device=device)
        self.o_proj = nn.Linear(nh * self.head_dim, h, bias=o_bias, device=device)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        attn_output, attn_weights = eager_attention_forward(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: dict, layer_idx: int, device=None):
        super().__init__()
        names = _names(config)
        self.self_attn = names["Attention"](config, layer_idx, device=device)
        self.mlp = names["MLP"](config, device=device)
        self.input_layernorm = names["RMSNorm"](config["hidden_size"], eps=config["rms_norm_eps"], device=device)
        self.post_attention_layernorm = names["RMSNorm"](
            config["hidden_size"], eps=config["rms_norm_eps"], device=device
        )

    def forward(self, hidden_states, attention_mask, position_embeddings):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states, position_embeddings=position_embeddings, attention_mask=attention_mask
        )
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def _find_packed_sequence_indices(position_ids: torch.Tensor) -> Optional[torch.Tensor]:
    first_dummy_value = position_ids[:, :1] - 1
    position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
    packed_sequence_mask = (position_diff != 1).cumsum(-1)
    if bool((packed_sequence_mask[:, -1] == 0).all()):
        return None
    return packed_sequence_mask


def create_causal_mask_eager(inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """masking_utils.create_causal_mask for eager attention, attention_mask=None, no cache.

    Returns a float mask [B, 1, S, S] (0 where attended, finfo(dtype).min elsewhere).
    """
    batch_size, q_length = inputs_embeds.shape[0], inputs_embeds.shape[1]
    kv_length, q_offset, kv_offset = q_length, 0, 0
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    # packed-sequence detection (training setup: no 2-D mask, no cache)
    pos = position_ids
    if batch_size != pos.shape[0]:
        pos = pos.expand(batch_size, -1)
    packed = _find_packed_sequence_indices(pos)
    if packed is not None:  # pragma: no cover - never true for plain arange positions
        raise NotImplementedError("packed sequences are not mirrored")
    # sdpa_mask(allow_is_causal_skip=False, allow_torch_fix=False, use_vmap=False)
    batch_arange = torch.arange(batch_size, device=device)
    head_arange = torch.arange(1, device=device)
    q_arange = torch.arange(q_length, device=device) + q_offset
    kv_arange = torch.arange(kv_length, device=device) + kv_offset
    b_idx = batch_arange[:, None, None, None]
    h_idx = head_arange[None, :, None, None]
    q_idx = q_arange[None, None, :, None]
    kv_idx = kv_arange[None, None, None, :]
    del b_idx, h_idx
    mask = kv_idx <= q_idx  # causal_mask_function -> bool [1, 1, S, S]
    mask = mask.expand(batch_size, -1, q_length, kv_length)
    # eager_mask: bool -> float
    min_dtype = torch.finfo(dtype).min
    return torch.where(mask, torch.tensor(0.0, device=mask.device, dtype=dtype), min_dtype)


class LlamaModel(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        names = _names(config)
        self.config = config
        self.embed_tokens = nn.Embedding(
            config["vocab_size"], config["hidden_size"], config["pad_token_id"], device=device
        )
        self.layers = nn.ModuleList(
            [names["DecoderLayer"](config, i, device=device) for i in range(config["num_hidden_layers"])]
        )
        self.norm = names["RMSNorm"](config["hidden_size"], eps=config["rms_norm_eps"], device=device)
        self.rotary_emb = names["RotaryEmbedding"](config, device=device)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(0, 0 + inputs_embeds.shape[1], device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask = create_causal_mask_eager(inputs_embeds, position_ids)

        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers[: self.config["num_hidden_layers"]]:
            hidden_states = decoder_layer(
                hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings
            )
        hidden_states = self.norm(hidden_states)
        return hidden_states


def for_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """loss_utils.ForCausalLMLoss with num_items_in_batch=None (reduction 'mean')."""
    logits = logits.float()  # no-op for fp32
    labels = labels.to(logits.device)
    labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    shift_labels = shift_labels.to(logits.device)
    return F.cross_entropy(logits, shift_labels, ignore_index=IGNORE_INDEX, reduction="mean")


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        config = llama_defaults(config)
        names = _names(config)
        self.config = config
        self.model = names["Model"](config, device=device)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False, device=device)
        if config["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        if device is None or torch.device(device).type != "meta":
            self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None):
        hidden_states = self.model(input_ids)
        logits_to_keep = 0
        slice_indices = slice(-logits_to_keep, None)
        logits = self.lm_head(hidden_states[:, slice_indices, :])
        if labels is None:
            return logits
        with _phase_loss():
            loss = for_causal_lm_loss(logits, labels, self.config["vocab_size"])
        return loss, logits


class Qwen2RMSNorm(LlamaRMSNorm):
    pass


class Qwen2RotaryEmbedding(LlamaRotaryEmbedding):
    pass


class Qwen2MLP(LlamaMLP):
    pass


class Qwen2Attention(LlamaAttention):
    pass


class Qwen2DecoderLayer(LlamaDecoderLayer):
    pass


class Qwen2Model(LlamaModel):
    pass


class Qwen2ForCausalLM(LlamaForCausalLM):
    pass


def _names(config: dict) -> dict:
    if config["model_type"] == "qwen2":
        return {
            "RMSNorm": Qwen2RMSNorm,
            "RotaryEmbedding": Qwen2RotaryEmbedding,
            "MLP": Qwen2MLP,
            "Attention": Qwen2Attention,
            "DecoderLayer": Qwen2DecoderLayer,
            "Model": Qwen2Model,
        }
    return {
        "RMSNorm": LlamaRMSNorm,
        "RotaryEmbedding": LlamaRotaryEmbedding,
        "MLP": LlamaMLP,
        "Attention": LlamaAttention,
        "DecoderLayer": LlamaDecoderLayer,
        "Model": LlamaModel,
    }


# --------------------------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------------------------


def gpt2_defaults(config: dict) -> dict:
    c = {
        "model_type": "gpt2",
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
    }
    c.update(config)
    if c["activation_function"] != "gelu_new":
        raise ValueError("only activation_function='gelu_new' is mirrored")
    if c["reorder_and_upcast_attn"]:
        raise ValueError("reorder_and_upcast_attn is not mirrored")
    return c


class Conv1D(nn.Module):
    """HF pytorch_utils.Conv1D: weight [nx, nf], y = addmm(bias, x.view(-1, nx), weight)."""

    def __init__(self, nf: int, nx: int, device=None):
        super().__init__()
        self.nf = nf
        self.nx = nx
        self.weight = nn.Parameter(torch.empty(nx, nf, device=device))
        self.bias = nn.Parameter(torch.zeros(nf, device=device))
        if device is None or torch.device(device).type != "meta":
            nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(size_out)
        return x


class NewGELUActivation(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, config: dict, layer_idx: int, device=None):
        super().__init__()
        max_positions = config["n_positions"]
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool, device=device)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.register_buffer("masked_bias", torch.tensor(-1e4, device=device), persistent=False)
        self.embed_dim = config["n_embd"]
        self.num_heads = config["n_head"]
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = config["scale_attn_weights"]
        self.scale_attn_by_inverse_layer_idx = config["scale_attn_by_inverse_layer_idx"]
        self.layer_idx = layer_idx
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim, device=device)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim, device=device)
        self.attn_dropout = nn.Dropout(config["attn_pdrop"])
        self.resid_dropout = nn.Dropout(config["resid_pdrop"])

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights = attn_weights / torch.full(
                [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
            )
        if self.scale_attn_by_inverse_layer_idx:
            attn_weights = attn_weights / float(self.layer_idx + 1)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        present = None  # use_cache=False
        attn_output, attn_weights = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        return attn_output, present


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size: int, config: dict, device=None):
        super().__init__()
        embed_dim = config["n_embd"]
        self.c_fc = Conv1D(intermediate_size, embed_dim, device=device)
        self.c_proj = Conv1D(embed_dim, intermediate_size, device=device)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(config["resid_pdrop"])

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPT2Block(nn.Module):
    def __init__(self, config: dict, layer_idx: int, device=None):
        super().__init__()
        hidden_size = config["n_embd"]
        inner_dim = config["n_inner"] if config["n_inner"] is not None else 4 * hidden_size
        self.ln_1 = nn.LayerNorm(hidden_size, eps=config["layer_norm_epsilon"], device=device)
        self.attn = GPT2Attention(config, layer_idx, device=device)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=config["layer_norm_epsilon"], device=device)
        self.mlp = GPT2MLP(inner_dim, config, device=device)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs = self.attn(hidden_states)
        attn_output = attn_outputs[0]
        outputs = attn_outputs[1:]
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = residual + feed_forward_hidden_states
        outputs = (hidden_states,) + outputs[1:]  # use_cache=False
        return outputs


class GPT2Model(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        self.embed_dim = config["n_embd"]
        self.wte = nn.Embedding(config["vocab_size"], self.embed_dim, device=device)
        self.wpe = nn.Embedding(config["n_positions"], self.embed_dim, device=device)
        self.drop = nn.Dropout(config["embd_pdrop"])
        self.h = nn.ModuleList([GPT2Block(config, i, device=device) for i in range(config["n_layer"])])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config["layer_norm_epsilon"], device=device)

    def forward(self, input_ids):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        device = input_ids.device
        past_length = 0
        position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=device)
        position_ids = position_ids.unsqueeze(0)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        # eager attention, attention_mask=None: no extended mask; head_mask = [None] * n_layer
        hidden_states = self.drop(hidden_states)
        output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)
        for block in self.h:
            outputs = block(hidden_states)
            hidden_states = outputs[0]
        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return hidden_states


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config: dict, device=None):
        super().__init__()
        config = gpt2_defaults(config)
        self.config = config
        self.transformer = GPT2Model(config, device=device)
        self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"], bias=False, device=device)
        if device is None or torch.device(device).type != "meta":
            for m in self.modules():
                if isinstance(m, nn.Embedding):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if config["tie_word_embeddings"]:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None):
        hidden_states = self.transformer(input_ids)
        lm_logits = self.lm_head(hidden_states)
        if labels is None:
            return lm_logits
        with _phase_loss():
            labels = labels.to(lm_logits.device)
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return loss, lm_logits


def build_model(case: dict, device=None) -> nn.Module:
    kind = case["model"]
    if kind == "llama":
        cfg = llama_defaults(case["config"])
        cls = Qwen2ForCausalLM if cfg["model_type"] == "qwen2" else LlamaForCausalLM
        return cls(case["config"], device=device)
    if kind == "gpt2":
        return GPT2LMHeadModel(case["config"], device=device)
    raise ValueError(f"unknown transformer model {kind!r}")
