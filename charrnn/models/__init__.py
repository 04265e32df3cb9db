"""The network and its parts: the stacked recurrent model, layer-normalised cells, regularisation,
the one-character stepper, weight averaging, device and precision choice, and scoring a text."""
