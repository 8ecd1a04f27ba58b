"""What graded results become: result files and the terminal table, a student's feedback page, the
class report and the exports. Text a submission controls is made safe on the way out."""
