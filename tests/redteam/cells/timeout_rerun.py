# attack: a cell that never ends, run again on every configuration after its first time-out
# cells: dlogits
# batch: walls
# vehicle: plain
while True:
    pass
