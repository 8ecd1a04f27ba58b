# attack: results forged in the results folder: a new file, and every result already written set to full marks
# cells: dbngain
# batch: walls
import json

out = course_path('results')
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, 'forged.json'), 'w') as f:
    f.write('{"score": 51.0}')
for root, dirs, files in os.walk(out):
    for name in files:
        if name.endswith('.json'):
            path = os.path.join(root, name)
            with open(path) as f:
                result = json.load(f)
            result['score'] = result.get('max_score', 51.0)
            with open(path, 'w') as f:
                json.dump(result, f)
proof('forged the results')
