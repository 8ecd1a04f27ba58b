# attack: the fork server killed (every child to come is forked from it)
# cells: dprobs
# batch: killers
os.kill(os.getppid(), signal.SIGKILL)
