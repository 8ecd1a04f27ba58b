# attack: the grading process itself killed (the batch dies)
# cells: dprobs
# batch: killers
os.kill(grader_pid(), signal.SIGKILL)
