"""The toy format's engine: a text translated into the text reversed; a pair scored 0 where the target is the source
reversed (-1 a token elsewhere). Its facts (name, abilities) are the declaration's."""

from aayn.formats.translator import Translator

from . import ReversedFolder


class ReversedTranslator(Translator):
    kind, abilities = ReversedFolder.name, ReversedFolder.abilities

    def __init__(self, folder, device: str = "cpu", threads=None):
        if device != "cpu":
            raise ValueError(f"--device {device}: the reversing engine runs on cpu")
        self.name = str(folder)
        self.generation = {}

    def encode(self, texts):
        return [[ord(character) for character in text] + [0] for text in texts]  # 0: the end of the text

    encode_targets = encode

    def decode_batch(self, sources, settings, prefixes, terms=None, alignment=None):
        return [[(0.0, "".join(chr(i) for i in reversed(ids[:-1])))] * settings.nbest for ids in sources]

    def score_batch(self, sources, targets):
        return [[0.0 if target[:-1] == source[-2::-1] else -1.0 for _ in target]
                for source, target in zip(sources, targets)]  # fmt: skip
