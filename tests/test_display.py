"""How models are described in the run table and by info."""

from charrnn.config import ModelConfig
from charrnn.display import regularisation


def test_the_description_names_each_dropout_that_is_set():
    assert regularisation(ModelConfig(vocab_size=5, dropout=0.2).to_dict()) == "dropout 0.2"
    every = ModelConfig(vocab_size=5, dropout=0.25, weight_drop=0.5, locked_dropout=True, input_dropout=0.1,
                        embed_dropout=0.05)
    assert regularisation(every.to_dict()) == ("dropout 0.25 (locked), weight drop 0.5, input dropout 0.1, "
                                               "embedding dropout 0.05")
    assert regularisation({"dropout": 0.0}) == "dropout 0"  # a checkpoint from before the other rates
