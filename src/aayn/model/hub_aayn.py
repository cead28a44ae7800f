"""What an AAYN model uploads to the Hub beyond transformers' defaults: the model card its folder came with.

This file travels with saved checkpoints as Hub remote code (the model file imports it): it imports only the
standard library.
"""

import os
import shutil


def is_aayn_card(path: str) -> bool:
    """A model card written by aayn: YAML metadata whose tags include "aayn"."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    return text.startswith("---\n") and "\n- aayn\n" in text.split("---\n")[1]


class AaynCardUpload:
    """`push_to_hub` saves the model, then writes the Hub's card for the repository (or transformers' generic one)
    over README.md. A model loaded from a folder with an aayn card (written by `aayn train` / `aayn average`:
    languages, license, scores, usage) uploads that card instead."""

    def _upload_modified_files(self, working_dir, *args, **kwargs):
        card = os.path.join(self.name_or_path or "", "README.md")
        if os.path.isfile(card) and is_aayn_card(card):
            shutil.copyfile(card, os.path.join(working_dir, "README.md"))
        return super()._upload_modified_files(working_dir, *args, **kwargs)
