"""The skips `bash .ci/run` allows (AAYN_STRICT=1), each as (test ids, a shell-style pattern; the reason, a regular
expression matched at its start), with a comment saying why it is allowed. Any other skip fails the run
(skip_report.py): a missing package, browser, venv or the other line's Python must fail loudly, not skip."""

COMMON = "tests/test_transformers_common.py::*"

ALLOWED = [
    # transformers' own common tests skip themselves where CI's CPU machine lacks the hardware or library they test
    (COMMON, r"test requires (accelerator|multiple accelerators|CUDA|MPS|Flash Attention|deepspeed|the kernels lib)"),
    (COMMON, r"test requires (GPU|a GPU|torch_accelerator|bitsandbytes|accelerate)"),
    # ... and their slow tests, which transformers runs only with RUN_SLOW=1 (its nightly CI)
    (COMMON, r"test is slow"),
    # ... and what they say does not apply to a model like aayn's (or Marian's): not composite, no sub-configs, no
    # sliding window, no learned positions to resize, no fp32-kept modules, legacy head pruning and masking, torch.fx
    # tracing of custom models, tests transformers itself disabled after its PR 39120
    (COMMON, r"(Model is not a composite model|This model is not composite|No subconfigs so the test)"),
    (COMMON, r"(Model does not support sliding window mask|Model does not have position embeddings)"),
    (COMMON, r"(Model class has no _keep_in_fp32_modules|Pruning is not activated|Model does not support head mask)"),
    (COMMON, r"(The model type aayn is not compatible with torch.fx|many failing tests after #39120)"),
    (COMMON, r"<class 'aayn\.model\.modeling_aayn\.AaynModel'> is not a priorited model"),
    # ... (5.x) no RoPE, no mixture of experts or grouped matmuls, no tensor-parallel plan, no weight-name
    # conversion table (aayn's checkpoints are its own names), no decoder-only head, no fp32-kept modules
    (COMMON, r"(This model does not support RoPE scaling|This model does not have RoPE)"),
    (COMMON, r"<class 'aayn\.model\.modeling_aayn\.AaynModel'> has no axial RoPE layer"),
    (COMMON, r"(AaynModel does not support grouped_mm|This model has no sparse experts)"),
    (COMMON, r"This model has no `output_router_logits` in its config"),
    (COMMON, r"(Model does not have a TP plan|No conversion found for <class 'aayn\.model\.modeling_aayn\.)"),
    (COMMON, r"(No decoder-only language modeling head|No `_keep_in_fp32_modules_strict` defined)"),
    (COMMON, r"AaynForConditionalGeneration (class )?has no _keep_in_fp32_modules"),
    # ... (5.x) tests of transformers' own cache-argument renaming and output-recording hooks, which a model that
    # takes its cache and records its hidden states its own way (test_generation.py checks both) does not use
    (COMMON, r"(Do not take a cache as input to forward|AaynForConditionalGeneration does not propagate hidden st)"),
    # the base model class has no SDPA test head of its own: transformers' suite checks SDPA on the LM class
    (COMMON, r"AaynModel does not support SDPA"),
    # aayn's own exemptions from that suite, each with its reason in test_transformers_common.py
    (COMMON, r"a causal-LM test \(it trains on input_ids as labels\)"),
    (COMMON, r"it embeds decoder_input_ids with get_input_embeddings\(\)"),
    (COMMON, r"it resizes the output layer with the source vocabulary"),
    # checks across the two lines made in both directions from the 5.x suite (tiny_models.ONCE_ACROSS_LINES)
    ("*", r"run once by \.ci/run, in its transformers 5\.x suite"),
    # a CPU machine's check that --device cuda is refused cannot run where there is a GPU
    ("tests/test_cli.py::*", r"this machine has a GPU"),
]
