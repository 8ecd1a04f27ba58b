# attack: the reference answers (solutions/answers.py of the checkout the grader runs from) into the feedback
# cells: dcounts
# batch: walls
import grader

checkout = os.path.dirname(os.path.dirname(grader.__file__))
with open(os.path.join(checkout, 'solutions', 'answers.py')) as f:
    text = f.read()
leak(text[text.index('# %% dhprebn'):][:400])
