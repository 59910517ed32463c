"""Node services: roles from the placement, the registry and heartbeats, child supervision,
the compiled command lines as this node runs them, managed judges and the distillation teacher."""
