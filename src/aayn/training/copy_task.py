"""The synthetic copy task of the Annotated Transformer: learn to output the input sequence.

A model that cannot learn this in a minute has a bug. It is also the README's first demonstration until
`aayn train recipes/demo.yaml` exists.
"""

import time

import torch
from transformers import get_cosine_schedule_with_warmup
from transformers.utils import logging

from ..model.configuration_aayn import AaynConfig
from ..model.modeling_aayn import AaynForConditionalGeneration

logger = logging.get_logger(__name__)

FIRST_SYMBOL = 4  # ids below are pad, bos, eos and one spare special


def copy_task_config(**overrides) -> AaynConfig:
    """A small AAYN: 2+2 layers of width 64, 10 symbols."""
    values = dict(
        vocab_size=FIRST_SYMBOL + 10,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        dropout=0.0,
        max_position_embeddings=32,
    )
    values.update(overrides)
    return AaynConfig(**values)


def copy_batch(batch_size: int, length: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Random symbol sequences ending with eos; each is both the source and the target."""
    symbols = torch.randint(FIRST_SYMBOL, vocab_size, (batch_size, length), generator=generator)
    return torch.cat([symbols, torch.full((batch_size, 1), 2)], dim=1)


def train_copy_task(
    config: AaynConfig | None = None,
    steps: int = 400,
    batch_size: int = 64,
    length: int = 10,
    learning_rate: float = 2e-3,
    warmup_steps: int = 100,
    seed: int = 0,
    max_grad_norm: float = 1.0,
) -> AaynForConditionalGeneration:
    """Train with the paper's Adam (§5.3: beta2=0.98, eps=1e-9) and warmup, then a cosine decay to zero with clipped
    gradients: with the paper's inverse-sqrt decay the learning rate is still half its peak at the last step, where
    the loss is near zero and Adam's steps on tiny gradients spike it; whether a run ends on a spike then depends on
    the CPU's float rounding (AVX2, AVX-512 and the default kernels end different seeds on one)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = AaynForConditionalGeneration(config or copy_task_config()).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps, num_training_steps=steps)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        batch = copy_batch(batch_size, length, model.config.vocab_size, generator)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == steps:
            logger.info(f"copy task step {step}/{steps}: loss {loss.item():.4f} ({time.perf_counter() - start:.1f}s)")
    return model.eval()


@torch.no_grad()
def copy_exact_match(model: AaynForConditionalGeneration, n: int = 200, length: int = 10, seed: int = 1234) -> float:
    """Fraction of fresh random sequences that greedy decoding copies exactly."""
    batch = copy_batch(n, length, model.config.vocab_size, torch.Generator().manual_seed(seed))
    output = model.generate(batch, max_new_tokens=length + 1, do_sample=False, num_beams=1)
    output = output[:, 1:]  # drop the decoder start token
    return (output == batch).all(dim=1).float().mean().item()
