"""How models are described in the run table and by info."""

from charrnn.cli.display import describe_model, regularisation
from charrnn.config import ModelConfig


def test_the_description_names_each_dropout_that_is_set():
    assert regularisation(ModelConfig(vocab_size=5, dropout=0.2).to_dict()) == "dropout 0.2"
    every = ModelConfig(vocab_size=5, dropout=0.25, weight_drop=0.5, locked_dropout=True, input_dropout=0.1,
                        embed_dropout=0.05)
    assert regularisation(every.to_dict()) == ("dropout 0.25 (locked), weight drop 0.5, input dropout 0.1, "
                                               "embedding dropout 0.05")
    assert regularisation({"dropout": 0.0}) == "dropout 0"  # a checkpoint from before the other rates


def test_the_shape_says_what_kind_of_stack_it_is():
    assert describe_model(ModelConfig(vocab_size=5).to_dict()) == "2×256 LSTM, embedding 64, dropout 0"
    assert describe_model(ModelConfig(vocab_size=5, cell="gru", layer_norm=True).to_dict()).startswith(
        "2×256 GRU (layer-normalised), embedding 64")
    skipping = ModelConfig(vocab_size=5, num_layers=3, skip_connections=True)
    assert describe_model(skipping.to_dict()).startswith("3×256 LSTM with skip connections, embedding 64")
