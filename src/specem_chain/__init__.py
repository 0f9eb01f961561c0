"""specem-chain: ensemble LLMs by next-segment prediction (SpecEM)."""
