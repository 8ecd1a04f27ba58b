# attack: the cell's own child crashed mid-cell (a segmentation fault, as a bad C extension call ends
#   it): the other answers, all right, must keep every point, and this cell must earn none
# cells: dh
# batch: walls
# answers: reference
import ctypes
ctypes.string_at(0)
