"""Runtime assembly in the manager: the model and its validation gate, resolution by
reference, the value-free runner job plan, Kubernetes object rendering and naming."""
