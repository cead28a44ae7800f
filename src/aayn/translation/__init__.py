"""The path a text takes to its translation, one module a step; `aayn translate`, `aayn score`, `aayn evaluate`,
`aayn serve` and the benchmarks all walk it:

1. **open** (`opening`): `--model` names a folder (or Hub id); its format (`aayn.formats`) opens it with its engine.
2. **read** (`documents` for files: .txt .html .srt .docx .odt .pptx .odp .epub; `bulk` for corpora in shards): the
   texts out of what the user gave, each checked (`aayn.formats.translator.check_texts`: a text no engine can take is
   named).
3. **split** (`sentences`): a paragraph into sentences by its language's rules; `markup`: an HTML fragment into the
   texts to translate and what is kept (tags, attributes, code).
4. **batch** (`aayn.formats.translator`, the template every engine meets, below the formats that implement it and
   this path that calls it): texts encoded, sorted by length and cut into batches of at most `batch_tokens`, each
   under its length limit.
5. **decode**: one batch at a time by the engine (`aayn.formats.<format>.engine`), under the `DecodingSettings` the
   folder's generation config and the caller give; word links (`aayn.formats.alignment`) and `scoring` (given pairs)
   beside it.
6. **restore**: the answers back in input order; sentences joined as they were split, inline markup placed by the
   alignment (`markup`), each document's text back in its place (`documents`).
7. **write**: standard output, or a file or shard written whole or not at all (`documents`, `bulk`, `bulk_ray` on
   a Ray cluster); `evaluation` scores a test set's translations (BLEU, chrF).

Nothing is imported here: each step imports what it needs when used.
"""
