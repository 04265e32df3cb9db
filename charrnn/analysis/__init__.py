"""Looking at trained models: comparing checkpoints, dynamic evaluation, memorisation, neuron
activations and loss curves."""
