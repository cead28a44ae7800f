"""Kernels of the AAYN model, apart from its architecture (as Liger-Kernel keeps `ops/` beside its models): the
attention kernel and its masks, §3.5's sinusoids, the CPU dropout, the §5.4 loss fused with the output layer, and
the CPU decoding layout of the output matrix. Each computes only what the model needs, and only the gradients it needs.

This file travels with saved checkpoints as Hub remote code (the model file imports it): it imports only torch.
"""

import math
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

# Attention masks and the §3.2.1 kernel


def reads_are_free(tensor: torch.Tensor) -> bool:
    """Whether the host may read `tensor`'s values at no cost: it lives in host memory, and no compiler is tracing
    (where a read would break the graph). On an accelerator, a read waits for every queued kernel to finish."""
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


def attention_implementation(config, output_attentions: bool) -> str:
    """The attention function a forward pass uses: the configured one, or eager where weights are asked for
    (only the eager path materializes them). Masks are built for it, so both sides must agree."""
    return "eager" if output_attentions else config._attn_implementation


def attention_mask_for(
    implementation: str,
    padding_mask: torch.Tensor | None,
    query_length: int,
    key_length: int,
    causal: bool,
    like: torch.Tensor,
):
    """The mask in the form `implementation` expects, or None where the kernel needs none.

    `padding_mask` is (batch, key_length), 1 for tokens and 0 for padding. Decoder self-attention is causal
    (§3.2.3: "prevent leftward information flow"); the queries are the last `query_length` of the keys. Where
    queries and keys are the same positions, SDPA and flash attention apply causality themselves (they read
    `AaynAttention.is_causal`), so no mask is built. `like` gives the device.

    Off the CPU, the form is chosen from the shapes alone, never from the mask's values: reading them
    (`padding_mask.all()`) would make the host wait for the device on every call of a training step. On the CPU
    the values are in host memory already, and a mask without padding is dropped (the kernels run faster without
    one). Flash attention drops it everywhere: transformers' flash path reads the sequence lengths to unpad anyway.
    """
    if padding_mask is not None and reads_are_free(padding_mask) and bool(padding_mask.all()):
        padding_mask = None
    if implementation.startswith("flash"):
        return None if padding_mask is not None and bool(padding_mask.all()) else padding_mask
    offset = key_length - query_length  # cached positions before the first query
    causal = causal and query_length > 1
    if padding_mask is None and not (causal and (offset > 0 or implementation != "sdpa")):
        return None
    if implementation == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        def mask_mod(batch, head, query, key):
            keep = key <= query + offset if causal else key >= 0
            return keep & padding_mask[batch, key].bool() if padding_mask is not None else keep

        batch = padding_mask.shape[0] if padding_mask is not None else None
        return create_block_mask(mask_mod, batch, None, query_length, key_length, device=like.device)
    mask = torch.ones(1, 1, query_length, key_length, dtype=torch.bool, device=like.device)
    if causal:
        mask = mask.tril(diagonal=offset)
    if padding_mask is not None:
        mask = mask & padding_mask[:, None, None, :].bool()
    return mask  # boolean, True where a query may attend, for SDPA and the eager kernel alike


def additive_bias(blocked: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attention goes, half the dtype's lowest number where `blocked` (a boolean tensor) says it may not:
    adding a score to it never overflows to -inf, and the softmax gives exactly 0 there either way."""
    bias = torch.zeros(blocked.shape, dtype=dtype, device=blocked.device)
    return bias.masked_fill_(blocked, torch.finfo(dtype).min / 2)


def sinusoidal_positions(
    start: int, length: int, d_model: int, device: torch.device, layout: str = "paper"
) -> torch.Tensor:
    """§3.5 Positional Encoding: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Computed, not learned and not stored, for any positions: the paper chose sinusoids because they "may allow
    the model to extrapolate to sequence lengths longer than the ones encountered during training".
    `layout="tensor2tensor"` (`config.position_encoding`) is the paper authors' code's, which fairseq and marian-nmt
    copied: all sines, then all cosines, frequencies 10000^(-i / (d/2 - 1)); "marian" is transformers' MarianMTModel's:
    all sines, then all cosines, the paper's frequencies (in float64, as it computes them). Imported models count
    positions from `config.position_offset` (fairseq: its padding id + 1)."""
    position = torch.arange(start, start + length, dtype=torch.float32, device=device)
    if layout in ("tensor2tensor", "marian"):  # all sines, then all cosines
        half = d_model // 2
        if layout == "marian":
            exponent = torch.arange(half, dtype=torch.float64, device=device) * 2 / d_model
            angles = position.double()[:, None] / torch.pow(10000.0, exponent)[None, :]
        else:
            steps = torch.arange(half, dtype=torch.float32, device=device)
            inv_freq = torch.exp(steps * -(math.log(10000) / (half - 1)))
            angles = position[:, None] * inv_freq[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=1).float()  # (length, d_model)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / d_model)
    )
    angles = position[:, None] * inv_freq[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)[:, :d_model]  # interleave sin, cos


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """§3.2.1 Scaled Dot-Product Attention, softmax(Q K^T / sqrt(d_k)) V, returning the weights too. The mask is
    boolean (True: attend) as the model builds it for SDPA and this kernel alike, or additive."""
    scores = torch.matmul(query, key.transpose(2, 3)).mul_(scaling)  # in place: the product is not saved
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        # a bias over (B, 1, T, S) built once per call: a masked_fill over every head's scores would cost another
        # pass over them backward, where an addition passes its gradient through
        blocked = torch.finfo(scores.dtype).min / 2  # as additive_bias, without a pass to invert the mask
        bias = torch.full(attention_mask.shape, blocked, dtype=scores.dtype, device=scores.device)
        scores = scores + bias.masked_fill_(attention_mask, 0.0)
    elif attention_mask is not None:
        scores = scores + attention_mask
    # in the scores' dtype: torch's softmax sums in float32 for bfloat16 and float16 inputs itself
    weights = F.softmax(scores, dim=-1)
    output = torch.matmul(F.dropout(weights, p=dropout, training=module.training), value)
    return output.transpose(1, 2).contiguous(), weights


def _sdpa_step(module, query, key, value, mask):
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=module.scaling)
    return output.transpose(1, 2).contiguous()


def _eager_step(module, query, key, value, mask):
    return eager_attention_forward(module, query, key, value, mask, module.scaling)[0]


# The attention kernel of a search's step (`AaynDecoder.step`; a search cache names it: `attention_kernel`), per
# attention implementation: `(module, query, key, value, additive mask or None) -> (B, T, nh, hs)`, the same call
# the configured function makes in eval (transformers' SDPA function with a mask and no dropout, or
# `eager_attention_forward`), without transformers' dispatch. Kernels without one (flash, flex) keep `forward`.
STEP_ATTENTION = {"sdpa": _sdpa_step, "eager": _eager_step}


# §5.4 Residual dropout


class AaynDropout(nn.Dropout):
    """`nn.Dropout`, with its random numbers drawn four elements at a time on CPU.

    torch's CPU dropout draws one number per element from its Mersenne Twister; here each 64-bit draw decides four
    elements by 16 bits each, so the drop probability is p rounded to a multiple of 1/65536 (0.1 -> 0.1000061) and
    kept values are scaled by the inverse of that rounded keep probability, which keeps the expectation exact.
    Elsewhere (GPUs) torch's fused kernel runs, and so does `F.dropout` under `torch.compile`, whose compiler draws
    the numbers in its own kernel (`Tensor.random_` cannot be traced).
    """

    def keep(self, x: torch.Tensor) -> tuple[torch.Tensor, float] | None:
        """(which elements of x stay, their scale), or None where `F.dropout` should run."""
        dropped = round(self.p * 65536)
        if not self.training or x.device.type != "cpu" or not 0 < dropped < 65536 or torch.compiler.is_compiling():
            return None
        count = x.numel()
        draws = torch.empty((count + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
        words = draws.view(torch.int16)[:count].view(x.shape)  # uniform over [-32768, 32767]
        return words >= dropped - 32768, 65536 / (65536 - dropped)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:  # the identity, as F.dropout's, without its call
            return x
        kept = self.keep(x)
        if kept is None:
            return F.dropout(x, self.p, self.training, self.inplace)
        return x * kept[0] * kept[1]  # the scale as a number: bfloat16 x is rounded once, as F.dropout rounds it

    def add_to(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + dropout(x), in one pass where the mask is ours."""
        if not self.training:
            return residual + x
        kept = self.keep(x)
        if kept is None:
            return residual + F.dropout(x, self.p, self.training)
        return torch.addcmul(residual, x, kept[0], value=kept[1])


# §5.4 Label smoothing, plain and fused with the output layer


def label_smoothed_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, num_items_in_batch: torch.Tensor | int | None = None
) -> torch.Tensor:
    """(1 - eps) * -log p(label) + eps * mean over the vocabulary of -log p, in float32, summed over the positions
    whose label is not -100 and divided by `num_items_in_batch` (the Trainer's count of such labels over every
    micro-batch of the optimizer step, on every process) or by their count here.

    The Trainer's `LabelSmoother` gives the same value per token; taking the loss here lets the Trainer normalize
    over the whole accumulated batch (it passes `num_items_in_batch` to models whose forward takes **kwargs)."""
    total = F.cross_entropy(
        logits.float().flatten(0, 1),
        labels.to(logits.device).flatten(),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=epsilon,
    )
    return _per_label(total, labels, num_items_in_batch)


def _per_label(total: torch.Tensor, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None):
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum()
    if torch.is_tensor(num_items_in_batch):  # no label at all: a loss of 0 with zero gradients, not 0 / 0
        return total / num_items_in_batch.to(total.device).clamp(min=1)
    return total / max(num_items_in_batch, 1)


# A chunk of about FUSED_LOSS_CHUNK_VALUES logits (4 MB of float32) keeps its passes (softmax, gradient, casts) in
# the CPU's cache; at least d_model rows, since each chunk adds a (vocab, d_model) product into the weight's
# gradient; at most FUSED_LOSS_MAX_CHUNK_VALUES where the vocabulary is large.
FUSED_LOSS_CHUNK_VALUES = 2**20
FUSED_LOSS_MAX_CHUNK_VALUES = 2**24


def fused_loss_chunk_rows(vocab: int, d_model: int) -> int:
    return min(max(d_model, FUSED_LOSS_CHUNK_VALUES // vocab), max(1, FUSED_LOSS_MAX_CHUNK_VALUES // vocab))


class _LinearLabelSmoothedLoss(torch.autograd.Function):
    """The summed label-smoothed loss of `hidden @ weight.T` without ever holding all the logits: row chunks are
    projected, scored and differentiated in the forward pass (Liger's fused linear cross-entropy), so only their
    gradients are kept. d loss / d logits = softmax - (1 - eps) * onehot(label) - eps / vocab.

    Under autocast the products run in its dtype with the weight and hidden states cast once per call (autocast
    alone would cast the (vocab, d_model) weight again for every chunk and product). Probabilities and sums stay
    float32. One softmax gives both the gradient and the loss: with z a row's logits and p = softmax(z),
    log-sum-exp(z) = max z - log max p (max p >= 1 / vocab, so it never underflows), and the row's loss is
    log-sum-exp(z) - (1 - eps) z[label] - eps mean(z), with no log-softmax pass."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, epsilon: float, unlabelled_rows: bool):
        rows, vocab = hidden.shape[0], weight.shape[0]
        chunk = fused_loss_chunk_rows(vocab, hidden.shape[1])
        device = hidden.device.type
        autocast = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else torch.promote_types(hidden.dtype, weight.dtype)
        exact = torch.promote_types(dtype, torch.float32)
        with torch.autocast(device, enabled=False):
            matrix, states = weight.to(dtype), hidden.to(dtype)
            offset = None if bias is None else bias.to(dtype)  # the output bias (Marian's), where there is one
            weights = None
            if unlabelled_rows:  # weighted 0; their states are zeroed, so they add nothing to the weight's gradient
                labelled = targets != -100
                weights = labelled.to(exact)
                targets = targets.clamp(min=0)  # any id will do where the weight is 0
                states = states * labelled[:, None].to(dtype)
            targets = targets[:, None]  # (rows, 1)
            total = torch.zeros((), dtype=exact, device=hidden.device)
            # only the gradients asked for: a frozen output matrix (or frozen states) costs no buffer and no product
            need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
            grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_bias else None
            grad_hidden = torch.empty(hidden.shape, dtype=dtype, device=hidden.device) if need_hidden else None
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
            # one set of buffers for all chunks, written in place: fresh memory costs the CPU a page fault at the
            # first write of every 4 kB page
            products = hidden.new_empty((min(chunk, rows), vocab), dtype=dtype)  # a chunk's logits, then gradient
            scores = products if dtype == exact else torch.empty_like(products, dtype=exact)
            partial = None if dtype == torch.float32 or not need_weight else torch.empty_like(grad_weight, dtype=dtype)
            for start in range(0, rows, chunk):
                h, y = states[start : start + chunk], targets[start : start + chunk]  # (n, d), (n, 1)
                n = h.shape[0]
                logits = torch.mm(h, matrix.t(), out=products[:n])  # (n, vocab)
                if offset is not None:
                    logits += offset
                if scores is not products:
                    logits = scores[:n].copy_(logits)
                loss = logits.amax(dim=-1) - (1 - epsilon) * logits.gather(1, y)[:, 0]  # (n,) per-row losses
                loss -= epsilon / vocab * logits.sum(dim=-1)
                probs = torch.softmax(logits, dim=-1, out=logits)  # the logits are not needed any more
                loss -= probs.amax(dim=-1).log()  # log-sum-exp(z) = max z - log max p
                total += loss.sum() if weights is None else loss @ weights[start : start + n]
                grad = probs.scatter_add_(1, y, probs.new_full(y.shape, epsilon - 1)).sub_(epsilon / vocab)
                if scores is not products:
                    grad = products[:n].copy_(grad)
                if need_hidden:
                    torch.mm(grad, matrix, out=grad_hidden[start : start + n])
                if need_bias:  # an unlabelled row's gradient is not zeroed: weighted out here
                    grad_bias += grad.sum(0) if weights is None else weights[start : start + n].to(grad.dtype) @ grad
                if not need_weight:
                    continue
                if partial is None:
                    grad_weight.addmm_(grad.t(), h)
                else:
                    grad_weight += torch.mm(grad.t(), h, out=partial)
            if need_hidden and unlabelled_rows:
                grad_hidden *= labelled[:, None]
        ctx.save_for_backward(
            None if grad_hidden is None else grad_hidden.to(hidden.dtype),
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
        )
        return total.float()

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return (
            None if grad_hidden is None else grad_hidden * grad_total.to(grad_hidden.dtype),
            None if grad_weight is None else grad_weight * grad_total.to(grad_weight.dtype),
            None if grad_bias is None else grad_bias * grad_total.to(grad_bias.dtype),
            None,
            None,
            None,
        )


def fused_label_smoothed_loss(
    hidden_states: torch.Tensor,
    output_layer: nn.Linear,
    labels: torch.Tensor,
    epsilon: float,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """`label_smoothed_loss(output_layer(hidden_states), ...)` without the full logits (the base model's 37000-way
    output layer: 600 MB of float32 per 4096 tokens); its bias, where it has one, is added to each chunk's logits.

    Positions whose label is -100 add nothing. On the CPU they are selected out (about a tenth of a demo batch's
    target positions are padding, and the output layer is most of a small model's step); elsewhere they are
    computed with a weight of 0, since a selection's size would be read back from the device on every step."""
    labels = labels.to(hidden_states.device)
    weight, bias = output_layer.weight, output_layer.bias
    if reads_are_free(labels):
        keep = labels != -100
        total = _LinearLabelSmoothedLoss.apply(hidden_states[keep], weight, bias, labels[keep], epsilon, False)
    else:
        flat = hidden_states.flatten(0, -2)
        total = _LinearLabelSmoothedLoss.apply(flat, weight, bias, labels.flatten(), epsilon, True)
    return _per_label(total, labels, num_items_in_batch)


def plain_linear(module: nn.Module) -> bool:
    """Whether `module` computes exactly `x @ weight.T (+ bias)`, so that the kernels here may read its weight and
    bias directly: a plain nn.Linear without hooks (an adapter, such as peft's LoRA, or a hook must be called)."""
    return type(module) is nn.Linear and not module._forward_hooks and not module._forward_pre_hooks


# The output layer while decoding on CPU

# Up to this many rows (sentences x beams) per decoding step, torch's CPU kernels multiply faster by the output
# matrix stored as (d_model, vocab) than as nn.Linear's (vocab, d_model); beyond, they do not.
DECODING_LAYOUT_MAX_ROWS = 128


@contextmanager
def cpu_decoding_layout(model):
    """While open, decoding steps of at most DECODING_LAYOUT_MAX_ROWS rows on CPU multiply by a contiguous
    (d_model, vocab) copy of the output matrix (`output_logits` reads it), made at the first such step.

    Invariant: the copy equals `lm_head.weight.T` for as long as it lives. It holds because nothing changes the
    weights inside `generate` (no gradients) and the copy is dropped on exit; training never sees it.
    """
    if model.lm_head.weight.device.type != "cpu" or model._decoding_matrix is not None:
        yield  # elsewhere, or already open (a nested generate)
        return
    model._decoding_matrix = [None]
    try:
        yield
    finally:
        model._decoding_matrix = None


def output_logits(lm_head: nn.Linear, hidden_states: torch.Tensor, decoding_matrix: list | None) -> torch.Tensor:
    """lm_head(hidden_states), or, inside `cpu_decoding_layout` for a small step, the same products with the
    (d_model, vocab) copy (another summation order; the tied embedding needs the (vocab, d_model) layout, so the
    copy lives only as long as the `generate` call). An output layer that is more than a plain Linear (an adapter,
    a hook) is always called."""
    weight = lm_head.weight
    if (
        decoding_matrix is None
        or not plain_linear(lm_head)
        or torch.is_grad_enabled()
        or hidden_states.dtype != weight.dtype
        or hidden_states.shape[:-1].numel() > DECODING_LAYOUT_MAX_ROWS
    ):
        return lm_head(hidden_states)
    if decoding_matrix[0] is None:
        decoding_matrix[0] = weight.detach().t().contiguous()
    logits = hidden_states @ decoding_matrix[0]
    return logits if lm_head.bias is None else logits + lm_head.bias
