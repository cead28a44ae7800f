"""The model's own files: `save_pretrained` copies each of them into every saved folder, where transformers loads
them with `trust_remote_code=True` in a process that never installed aayn. So they import only each other (one dot),
torch and transformers; `compat_aayn.py` holds what differs between the transformers lines. The tools around the
model (training, the command line, exports, serving) live in the package above. Their old paths (`aayn.modeling_aayn`,
...) still import the same modules (`aayn.registration`)."""
