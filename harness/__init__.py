"""coevolab: every condition × seed of a judge–policy co-evolution grid as one compiled JAX program."""
