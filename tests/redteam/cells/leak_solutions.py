# attack: the reference answers (the solved notebook of the checkout the grader runs from) into the feedback
# cells: dcounts
# batch: walls
import grader

checkout = os.path.dirname(os.path.dirname(grader.__file__))
with open(os.path.join(checkout, 'solutions', 'backprop_ninja_solved.ipynb')) as f:
    text = f.read()
leak(text[text.index('hprebn is used twice'):][:400])
