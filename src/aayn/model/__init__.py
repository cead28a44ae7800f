"""The model's own files: `save_pretrained` copies each of them into every saved folder, where transformers loads
them with `trust_remote_code=True` in a process that never installed aayn. So they import only each other (one dot),
torch and transformers; `compat_aayn.py` holds what differs between the transformers lines. The tools around the
model (training, the command line, exports, serving) live in the package above.

What a folder carries is what it needs to be the paper's model and decode by §6.1 without aayn: the architecture
(`modeling_aayn`, `ops_aayn`, `configuration_aayn`), the cache protocol and the search's caches (`cache_aayn`), the
search itself (`search_aayn`, `decoding_aayn`, `policy_aayn`: beam and greedy, GNMT's penalty, source + 50, the
exact stop, ensembles), what `generate()` and `pipeline("translation")` route through (`generation_aayn`,
`pipeline_aayn`), lexical constraints and glossaries (`constraints_aayn`, `glossary_aayn`), the tokenizer of imported
fairseq folders, resizing, the Hub card. What only speeds decoding up on one kind of device lives in the installed
package and is asked for by name: the search's static steps, replayed from CUDA graphs or compiled
(`generate(cuda_graphs=True)`, `generate(compiled_steps=True)`, `aayn.formats.aayn.cuda_graphs`), which without
aayn are refused in one line.
"""
