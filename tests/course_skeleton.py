"""A driver written against the course's skeleton names, for tests/test_course_files.py.

    mpiexec -n P python3 tests/course_skeleton.py [BATCHES EPOCHS]

Code written against the skeleton reads num_masters, num_workers, num_layers and eta, and hooks
the two roles by their names, do_worker(training_data) and do_master(validation_data), which fit
calls. Rank 0 prints one line 'seen: [json per rank]' of what the ranks saw; every rank
prints the course's accuracy line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collect import *  # noqa: E402,F401,F403
from network import *  # noqa: E402,F403
from time import time  # noqa: E402
from async_network import *  # noqa: E402,F403

numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
batch_size, epochs = numbers if numbers else (632, 5)


class SkeletonNetwork(AsynchronicNeuralNetwork):  # noqa: F405
    """A student's subclass: it counts the calls of the two roles, with the skeleton's signatures."""

    roles = []

    def do_worker(self, training_data):
        self.roles.append("do_worker")
        super().do_worker(training_data)

    def do_master(self, validation_data):
        self.roles.append("do_master")
        super().do_master(validation_data)


training_data, validation_data, test_data = load_mnist()  # noqa: F405
nn = SkeletonNetwork([784, 128, 64, 10], 0.1, 16, batch_size, epochs, 2)
seen = {"num_masters": nn.num_masters, "num_workers": nn.num_workers, "num_layers": nn.num_layers,
        "eta": nn.eta}
nn.eta = 0.2  # the skeleton's name for the learning rate: setting it sets learning_rate
seen["learning_rate_after_eta"] = nn.learning_rate
start1 = time()
nn.fit(training_data, validation_data)
seen["roles"] = nn.roles
everyone = nn.comm.gather(seen, root=0)  # one line from rank 0: the ranks' own lines may interleave
if nn.rank == 0:
    print(f"seen: {json.dumps(everyone)}", flush=True)
print('Time async:', time() - start1)
print("Test Accuracy: " + str(nn.validate(test_data) / 100.0) + "%")
