# attack: str.format walks dunder attributes the static check never sees
# cells: dcounts_sum
# batch: walls
# defence: static check (a Python-level read: no kernel wall could stop it)
# vehicle: plain
spec = '{0.' + '_' * 2 + 'class' + '_' * 2 + '.' + '_' * 2 + 'mro' + '_' * 2 + '}'
dcounts_sum = {}['REDTEAM-PROOF format reached ' + spec.format(probs)]
