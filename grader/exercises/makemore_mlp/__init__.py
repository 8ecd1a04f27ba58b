"""Karpathy's makemore MLP (embedding, linear, batch norm, tanh, linear, cross-entropy), the exercise
the course was built for."""
