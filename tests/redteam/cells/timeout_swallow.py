# attack: the cell's time limit swallowed (CellTimeout caught, SIGALRM ignored), the cell running on
# cells: dembcat
# batch: walls
signal.signal(signal.SIGALRM, signal.SIG_IGN)
while True:
    try:
        while True:
            pass
    except BaseException:
        pass
