"""How models are described in the run table and by info."""


from charrnn.cli.display import describe_evaluations, describe_model, describe_split, regularisation
from charrnn.config import VAL_MAX_CHARS, ModelConfig, TrainConfig


def test_the_description_names_each_dropout_that_is_set_and_what_kind_of_stack_it_is():
    assert regularisation(ModelConfig(vocab_size=5, dropout=0.2).to_dict()) == "dropout 0.2"
    every = ModelConfig(vocab_size=5, dropout=0.25, weight_drop=0.5, locked_dropout=True, input_dropout=0.1,
                        embed_dropout=0.05)
    assert regularisation(every.to_dict()) == ("dropout 0.25 (locked), weight drop 0.5, input dropout 0.1, "
                                               "embedding dropout 0.05")
    assert regularisation({"dropout": 0.0}) == "dropout 0"  # a checkpoint from before the other rates
    assert describe_model(ModelConfig(vocab_size=5).to_dict()) == "2×256 LSTM, embedding 64, dropout 0"
    assert describe_model(ModelConfig(vocab_size=5, cell="gru", layer_norm=True).to_dict()).startswith(
        "2×256 GRU (layer-normalised), embedding 64")
    skipping = ModelConfig(vocab_size=5, num_layers=3, skip_connections=True)
    assert describe_model(skipping.to_dict()).startswith("3×256 LSTM with skip connections, embedding 64")


def test_the_run_table_says_what_was_held_out_and_what_each_evaluation_scores():
    assert describe_split(1_115_394, 1_003_854, 0.1) == "1,003,854 train / 111,540 validation (the last 10%)"
    assert describe_split(10**8, 10**8 - VAL_MAX_CHARS, 0.1) == \
        f"{10**8 - VAL_MAX_CHARS:,} train / {VAL_MAX_CHARS:,} validation (the last {VAL_MAX_CHARS:,} " \
        f"characters: 10%, capped)"
    assert describe_split(3_000_005, 2_700_005, 0.1).endswith("(the last 300,000 characters: 10%, capped)")
    config = TrainConfig(out_dir="unused")
    assert describe_evaluations(config, VAL_MAX_CHARS) == "every 1,000 steps and at the end"
    assert describe_evaluations(TrainConfig(out_dir="unused", eval_chars=20_000), 111_539) == \
        "every 1,000 steps and at the end, each on the first 20,000 validation chars"
    budgeted = TrainConfig(out_dir="unused", time_budget=100, eval_chars=20_000)
    assert describe_evaluations(budgeted, 111_539) == \
        "at the end, and during training as the time budget says below, each on the first 20,000 " \
        "validation chars"
