# attack: a lone surrogate in an error message (not encodable as UTF-8) in the feedback: str.format's
# attribute lookup puts the name into its AttributeError as it is
# cells: dprobs
# batch: input
# vehicle: plain
dprobs = '{0.\ud800 lone surrogate}'.format(probs)
