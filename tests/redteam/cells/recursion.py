# attack: a recursion bomb past Python's guard: the C stack overflows (or, with no stack limit, grows
# until the cell is stopped) while the cell's own data is printed
# cells: dW1
# batch: walls
once('recursion')
sys.setrecursionlimit(10 ** 8)
nested = []
for i in range(10 ** 6):
    nested = [nested]
repr(nested)
