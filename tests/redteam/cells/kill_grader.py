# attack: the grading process itself killed (the batch dies)
# cells: dprobs
# batch: killers
# graded: last
os.kill(grader_pid(), signal.SIGKILL)
