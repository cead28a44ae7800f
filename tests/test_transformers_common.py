"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`), the contract every model inside
transformers meets, run against aayn as transformers runs them for Marian: a model tester with tiny shapes,
`AaynModel` and `AaynForConditionalGeneration`, the default configuration and its variants. The suite comes from
the installed transformers' own source distribution (`transformers_suite.py`); what it skips and why is listed in
`SKIPPED` below and in tests/README.md."""

import importlib
import os
import sys
import unittest

import pytest
from transformers.models.auto import modeling_auto as auto
from transformers_suite import PACKAGE, suite_folder

from aayn import AaynConfig, AaynForConditionalGeneration, AaynModel

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

try:
    sys.path.insert(0, str(suite_folder()))
except RuntimeError as error:  # no package index at hand: a user's offline machine
    if os.environ.get("AAYN_STRICT"):  # the README's test command, bash .ci/run: nothing that matters skips
        raise
    pytest.skip(f"transformers' common tests are not at hand: {error}", allow_module_level=True)
common = importlib.import_module(f"{PACKAGE}.test_modeling_common")
configuration_common = importlib.import_module(f"{PACKAGE}.test_configuration_common")
GenerationTesterMixin = importlib.import_module(f"{PACKAGE}.generation.test_utils").GenerationTesterMixin


class AaynModelTester:
    """Tiny shapes, as transformers' `MarianModelTester`."""

    batch_size, seq_length, vocab_size, hidden_size = 13, 7, 99, 16
    num_hidden_layers, num_attention_heads, intermediate_size = 2, 4, 8
    is_training = True

    def __init__(self, parent, **config_overrides):
        self.parent = parent
        self.config_overrides = config_overrides
        self.encoder_seq_length = self.decoder_seq_length = self.seq_length

    def get_config(self) -> AaynConfig:
        values = dict(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=100,
        )
        values.update(self.config_overrides)
        return AaynConfig(**values)

    def prepare_config_and_inputs(self):
        config = self.get_config()
        input_ids = common.ids_tensor([self.batch_size, self.seq_length], config.vocab_size).clamp(3)
        input_ids[:, -1] = config.eos_token_id
        decoder_input_ids = common.ids_tensor([self.batch_size, self.seq_length], config.decoder_vocab_size).clamp(3)
        inputs = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": input_ids.ne(config.pad_token_id),
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


# Tests of the suite that do not apply to aayn, each with its reason
SKIPPED = {
    "test_training_overfit": "a causal-LM test (it trains on input_ids as labels); transformers' Marian fails it too",
}


def skipped(reasons: dict[str, str]):
    """A class decorator: each named test of the suite replaced by a skip that gives its reason."""

    def decorate(cls):
        for name, reason in reasons.items():

            @unittest.skip(reason)
            def test(self):
                pass

            setattr(cls, name, test)
        return cls

    return decorate


@skipped(SKIPPED)
class AaynCommonTest(common.ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    """The default configuration: the paper's shared vocabulary, tied output layer, post-norm."""

    all_model_classes = (AaynModel, AaynForConditionalGeneration)
    all_generative_model_classes = (AaynForConditionalGeneration,)
    is_encoder_decoder = True
    fx_compatible = False
    # the suite runs its missing-weights initialization test only for models added from 2023 on (read from a
    # copyright line aayn's files do not have) or marked as here
    test_can_init_all_missing_weights_before_2023 = True
    # 4.57's head pruning and head masking: legacy features that 5.x removed and aayn never had
    test_pruning = test_head_masking = False
    config_overrides: dict = {}

    @classmethod
    def setUpClass(cls):
        # the suite knows a model's task from transformers' name tables (labels for its training tests); aayn is
        # entered in them for the class, as Marian is in transformers itself
        cls.names = (
            (auto.MODEL_MAPPING_NAMES, "AaynModel"),
            (auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "AaynForConditionalGeneration"),
        )
        for table, name in cls.names:
            table["aayn"] = name

    @classmethod
    def tearDownClass(cls):
        for table, _ in cls.names:
            table.pop("aayn", None)

    def setUp(self):
        self.model_tester = AaynModelTester(self, **self.config_overrides)
        self.config_tester = configuration_common.ConfigTester(self, config_class=AaynConfig, d_model=16)

    def test_config(self):
        self.config_tester.run_common_tests()


# With separate vocabularies the output layer spans the target vocabulary, the decoder embeds with its own matrix
SEPARATE = {
    "test_resize_embeddings_untied": "it resizes the output layer with the source vocabulary; with separate "
    "vocabularies it spans the target's and resize_decoder_token_embeddings resizes it, as in Marian",
    "test_inputs_embeds_matches_input_ids": "it embeds decoder_input_ids with get_input_embeddings(), the "
    "encoder's matrix, which separate vocabularies do not share with the decoder",
}


@skipped(SKIPPED | SEPARATE)
class AaynSeparateVocabulariesTest(AaynCommonTest):
    config_overrides = {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 77}


@skipped(SKIPPED)
class AaynUntiedTest(AaynCommonTest):
    config_overrides = {"tie_word_embeddings": False}


@skipped(SKIPPED | SEPARATE)
class AaynSeparateUntiedTest(AaynCommonTest):
    config_overrides = {
        "share_encoder_decoder_embeddings": False,
        "decoder_vocab_size": 77,
        "tie_word_embeddings": False,
    }


@skipped(SKIPPED)
class AaynPreNormTest(AaynCommonTest):
    config_overrides = {"norm_first": True}
