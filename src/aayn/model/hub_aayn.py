"""What an AAYN model saves and uploads beyond transformers' defaults: its own code where FSDP2 has sharded it, and
the model card its folder came with.

This file travels with saved checkpoints as Hub remote code (the model file imports it): it imports only the
standard library at its top (transformers where it saves).
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


class AaynOwnCodeSave:
    """A model sharded by FSDP2 saves the folder the unsharded model saves. `fully_shard` makes the model an instance
    of a class of its own (`FSDPAaynForConditionalGeneration`, defined in torch): transformers would copy torch's
    FSDP files into the folder, leave ours out, and name that class in `auto_map`, so that the folder loaded nowhere
    without aayn."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save, with the code and `auto_map` of the model's own class."""
        from transformers.dynamic_module_utils import custom_object_save

        own = next(cls for cls in type(self).__mro__ if not cls.__module__.startswith("torch."))
        main_process = kwargs.get("is_main_process", args[0] if args else True)
        if own is type(self) or self._auto_class is None or not main_process:
            return super().save_pretrained(save_directory, *args, **kwargs)
        os.makedirs(save_directory, exist_ok=True)
        custom_object_save(own.__new__(own), save_directory, config=self.config)
        made = type(self)  # transformers' own copy skipped: it asks the class (5.x) or the model (4.57)
        inherited = "_auto_class" not in vars(made)
        previous, made._auto_class = made._auto_class, None
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            if inherited:
                del made._auto_class
            else:
                made._auto_class = previous
